//go:build linux

package acceptance_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/netproxy"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/internal/wake"
	"github.com/orbitrun/orbit/modules/admin"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// pollInterval is how often a test re-reads the database while it waits for
// a state it cannot be told about.
const pollInterval = 50 * time.Millisecond

// eventually polls cond until it holds and fails the test after timeout;
// describe says what was seen last.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s still not %s: %s", timeout, what, describe())
		}
		<-ticker.C
	}
}

// openDB opens a pool on dsn for the test's own queries.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	pool, err := db.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// newCredential creates a queue and a credential with permissions on it,
// directly in the database; without permissions, it may submit, read and
// work the queue's tasks.
func newCredential(t testing.TB, pool *sql.DB, permissions ...string) (queueID, token string) {
	t.Helper()
	if len(permissions) == 0 {
		permissions = []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksWork}
	}
	store := admin.NewStore(pool)
	ctx := context.Background()
	sc, err := store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{Namespace: "ns", Application: "app", Environment: "env", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err = store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Permissions: permissions,
		Queues:      []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	return sc.QueueID, token
}

// SDK log messages the tests watch for: the worker logs every acknowledged
// outcome at debug level, with the ack's deduplicated flag.
const (
	msgAcknowledged = "orbit worker: outcome acknowledged"
	msgConnected    = "orbit worker: connected"
)

// workerLog is the slog.Handler of an SDK worker under test: it keeps the
// log for a failure report, counts connections and records which tasks'
// outcomes the server acknowledged as deduplicated repeats. The worker logs
// without attributes or groups of its own, so WithAttrs and WithGroup return
// the handler unchanged.
type workerLog struct {
	text     slog.Handler
	out      *logBuffer
	mu       sync.Mutex
	dedup    map[string]bool
	connects int
	// onAck, when set before the worker starts, is called for every
	// outcome the server acknowledged.
	onAck   func(taskID string, dedup bool)
	changed wake.Broadcast
}

func newWorkerLog() *workerLog {
	out := &logBuffer{}
	return &workerLog{
		text:  slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}),
		out:   out,
		dedup: map[string]bool{},
	}
}

func (l *workerLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *workerLog) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case msgAcknowledged:
		var taskID string
		var dedup bool
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "task_id":
				taskID = a.Value.String()
			case "deduplicated":
				dedup = a.Value.Bool()
			}
			return true
		})
		if l.onAck != nil {
			l.onAck(taskID, dedup)
		}
		if dedup {
			l.mu.Lock()
			l.dedup[taskID] = true
			l.mu.Unlock()
			l.changed.Notify()
		}
	case msgConnected:
		l.mu.Lock()
		l.connects++
		l.mu.Unlock()
	}
	return l.text.Handle(ctx, r)
}

func (l *workerLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *workerLog) WithGroup(string) slog.Handler      { return l }

// waitDeduplicated waits until the server has acknowledged an outcome of
// taskID as a deduplicated repeat.
func (l *workerLog) waitDeduplicated(t testing.TB, taskID string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		woken := l.changed.C()
		l.mu.Lock()
		done := l.dedup[taskID]
		l.mu.Unlock()
		if done {
			return
		}
		select {
		case <-woken:
		case <-deadline.C:
			t.Fatalf("within %s the worker logged no %q with deduplicated=true for task %s", timeout, msgAcknowledged, taskID)
		}
	}
}

func (l *workerLog) connections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connects
}

// TestServerKilledMidLeaseLosesNothing kills the orbit server with SIGKILL
// while a worker holds leases, one completion is committed but its ack lost,
// and one lease is persisted but its task.assign never arrives; it restarts
// the server on the same port and database and checks that every task ends
// SUCCEEDED with exactly one completed attempt and one task.succeeded event,
// the repeated completion is deduplicated (T-5), and the lost assignment is
// recovered by the sweeper (T-6).
func TestServerKilledMidLeaseLosesNothing(t *testing.T) {
	t.Parallel()
	const (
		total    = 50
		capacity = 4
	)
	dir := t.TempDir()
	bin := orbitproc.Build(t, dir, raceEnabled)
	dsn := testdb.NewDSN(t)
	pool := openDB(t, dsn)
	queueID, token := newCredential(t, pool)
	params := orbitproc.Serve{Bin: bin, Dir: dir, Addr: orbitproc.FreeAddr(t), DSN: dsn, Env: []string{
		"ORBIT_WORKERS_LEASE_DURATION=2s",
		"ORBIT_WORKERS_HEARTBEAT_INTERVAL=500ms",
		"ORBIT_TASKS_SWEEP_INTERVAL=200ms",
		"ORBIT_LOG_LEVEL=debug",
	}}
	first := orbitproc.Start(t, params)
	px := netproxy.Start(t, params.Addr)

	// Tasks whose i is a multiple of 10 block: task 0 until gateFirst is
	// closed, the others until gateRest is closed.
	var calls atomic.Int64
	blocked := make(chan int, total)
	gateFirst, gateRest := make(chan struct{}), make(chan struct{})
	handler := func(ctx context.Context, task *orbit.AssignedTask) orbit.Outcome {
		calls.Add(1)
		var in struct {
			I int `json:"i"`
		}
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return orbit.Failed("BAD_INPUT", "input is not {\"i\": n}")
		}
		if in.I%10 == 0 {
			gate := gateRest
			if in.I == 0 {
				gate = gateFirst
			}
			select {
			case blocked <- in.I:
			default:
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return orbit.Release("worker stopping before the gate opened")
			}
		}
		return orbit.Succeeded(task.Input)
	}
	wlog := newWorkerLog()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog.out)
		}
	})
	ws := startWorkers(t, 1, orbit.WorkerConfig{
		BaseURL: px.URL(), Token: token, QueueID: queueID, Capacity: capacity,
		Backoff:         orbit.BackoffConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		ShutdownTimeout: 5 * time.Second,
		Logger:          slog.New(wlog),
	}, handler)

	client, err := orbit.NewClient("http://"+params.Addr, token, orbit.WithHTTPClient(newHTTPClient(t, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, total)
	for i := range total {
		res, err := client.SubmitTask(context.Background(), fmt.Sprintf("crash-%d", i), orbit.SubmitTaskRequest{
			QueueID: queueID, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Idempotent: true, MaxAttempts: 5,
		})
		if err != nil {
			t.Fatalf("submit task %d: %v", i, err)
		}
		ids[i] = res.Task.ID
	}
	states := func() string { return fmt.Sprint(stateCounts(t, pool, queueID)) }

	// Tasks are leased in submission order: 0, 10, 20 and 30 fill the
	// worker's capacity and block; the 19 tasks after 30 wait.
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var got []int
	for len(got) < capacity {
		select {
		case i := <-blocked:
			got = append(got, i)
		case <-timer.C:
			t.Fatalf("only tasks %v blocked; tasks by state %s", got, states())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{0, 10, 20, 30}) {
		t.Fatalf("blocked tasks %v, want [0 10 20 30]", got)
	}
	eventually(t, 30*time.Second, "27 SUCCEEDED, 4 RUNNING and 19 PENDING", func() bool {
		c := stateCounts(t, pool, queueID)
		return c[orbit.TaskStateSucceeded] == 27 && c[orbit.TaskStateRunning] == 4 && c[orbit.TaskStatePending] == 19
	}, states)

	// From here the server's frames to the worker are lost: it commits task
	// 0's completion, but the ack never arrives; it leases task 31 in its
	// place, but the task.assign never arrives either.
	if n := px.DropReplies(); n != 1 {
		t.Fatalf("the proxy carries %d connections, want the worker's one", n)
	}
	close(gateFirst)
	eventually(t, 30*time.Second, "task 0 SUCCEEDED and task 31 leased", func() bool {
		return taskState(t, pool, ids[0]) == orbit.TaskStateSucceeded && taskState(t, pool, ids[31]) != orbit.TaskStatePending
	}, states)

	first.Kill(t)
	// The blocked handlers finish while the server is down; their outcomes
	// wait in the worker until it reconnects.
	close(gateRest)
	second := orbitproc.Start(t, params)

	eventually(t, 2*time.Minute, "every task SUCCEEDED", func() bool {
		return stateCounts(t, pool, queueID)[orbit.TaskStateSucceeded] == total
	}, states)
	wlog.waitDeduplicated(t, ids[0], 30*time.Second)
	ws.stop(t)
	second.Stop(t)
	first.CheckNoRace(t)
	second.CheckNoRace(t)

	checkSucceededOnce(t, pool, queueID, total)
	attempts := attemptCounts(t, pool, queueID)
	if a := attempts[ids[0]]; len(a) != 1 || a["COMPLETED"] != 1 {
		t.Errorf("task 0 has attempts %v; want one, COMPLETED once although its completion was sent twice", a)
	}
	if a := attempts[ids[31]]; a["EXPIRED"] != 1 || a["COMPLETED"] != 1 {
		t.Errorf("task 31 has attempts %v; want its lost lease EXPIRED and a second attempt COMPLETED", a)
	}
	if n := wlog.connections(); n < 2 {
		t.Errorf("the worker connected %d times, want at least 2", n)
	}
	t.Logf("handler calls %d for %d tasks; worker connections %d; %s", calls.Load(), total, wlog.connections(), summarize(t, pool, queueID))
}

// taskState returns a task's state from the database.
func taskState(t testing.TB, pool *sql.DB, id string) string {
	t.Helper()
	var state string
	if err := pool.QueryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}
