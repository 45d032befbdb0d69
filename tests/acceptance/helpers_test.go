package acceptance_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// workerGroup runs SDK workers until stop is called.
type workerGroup struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	errs   chan error // one slot per worker
}

// startWorkers runs n workers with cfg and handler. They are stopped, and
// must have returned nil, when stop is called or the test ends.
func startWorkers(t testing.TB, n int, cfg orbit.WorkerConfig, handler orbit.TaskHandler) *workerGroup {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ws := &workerGroup{cancel: cancel, errs: make(chan error, n)}
	for i := range n {
		c := cfg
		c.WorkerName = fmt.Sprintf("worker-%d", i)
		w, err := orbit.NewWorker(c, handler)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			ws.errs <- w.Run(ctx)
		}()
	}
	t.Cleanup(func() { ws.stop(t) })
	return ws
}

// stop cancels the workers, waits for every Run to return and fails the
// test for each error. Calling it again does nothing.
func (ws *workerGroup) stop(t testing.TB) {
	t.Helper()
	ws.once.Do(func() {
		ws.cancel()
		ws.wg.Wait()
		close(ws.errs)
		for err := range ws.errs {
			if err != nil {
				t.Errorf("worker Run: %v", err)
			}
		}
	})
}

// newHTTPClient returns a client that keeps enough idle connections for
// conns concurrent callers, closed when the test ends.
func newHTTPClient(t testing.TB, conns int) *http.Client {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// logBuffer collects log lines for a failure report.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// taskRow is a task as the checks read it from the database.
type taskRow struct {
	id, state     string
	revision      uint64
	attempts      int
	input, result string
}

// queueTasks returns every task of a queue.
func queueTasks(t testing.TB, pool *sql.DB, queueID string) []taskRow {
	t.Helper()
	rows, err := pool.Query(`SELECT id, state, revision, attempts, input, COALESCE(result, '') FROM tasks WHERE queue_id = ?`, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []taskRow
	for rows.Next() {
		var r taskRow
		if err := rows.Scan(&r.id, &r.state, &r.revision, &r.attempts, &r.input, &r.result); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stateCounts returns how many tasks of a queue are in each state.
func stateCounts(t testing.TB, pool *sql.DB, queueID string) map[string]int {
	t.Helper()
	rows, err := pool.Query(`SELECT state, COUNT(*) FROM tasks WHERE queue_id = ? GROUP BY state`, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			t.Fatal(err)
		}
		out[state] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// attemptCounts returns, per task of a queue, how many attempts ended in
// each attempt state.
func attemptCounts(t testing.TB, pool *sql.DB, queueID string) map[string]map[string]int {
	t.Helper()
	rows, err := pool.Query(`SELECT task_id, state, COUNT(*) FROM task_attempts WHERE queue_id = ? GROUP BY task_id, state`, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var id, state string
		var n int
		if err := rows.Scan(&id, &state, &n); err != nil {
			t.Fatal(err)
		}
		if out[id] == nil {
			out[id] = map[string]int{}
		}
		out[id][state] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eventRow is a result-log row as the checks read it.
type eventRow struct {
	sequence uint64
	typ      string
	taskID   string
	revision uint64
}

// queueEvents returns a queue's result log in sequence order.
func queueEvents(t testing.TB, pool *sql.DB, queueID string) []eventRow {
	t.Helper()
	rows, err := pool.Query(`SELECT sequence, type, task_id, task_revision FROM result_events WHERE queue_id = ? ORDER BY sequence`, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []eventRow
	for rows.Next() {
		var e eventRow
		if err := rows.Scan(&e.sequence, &e.typ, &e.taskID, &e.revision); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSucceededOnce checks the rules every test here holds: each task of
// the queue is SUCCEEDED with the result its handler reported (the input,
// echoed), has exactly one COMPLETED attempt, and appears in exactly one
// task.succeeded event; the log's sequences run from 1 without gaps, and no
// other result type was appended.
func checkSucceededOnce(t testing.TB, pool *sql.DB, queueID string, want int) {
	t.Helper()
	all := queueTasks(t, pool, queueID)
	if len(all) != want {
		t.Errorf("queue holds %d tasks, want %d", len(all), want)
	}
	for _, r := range all {
		if r.state != orbit.TaskStateSucceeded || r.result != r.input {
			t.Errorf("task %s: state %s, result %q for input %q; want SUCCEEDED with the input echoed", r.id, r.state, r.result, r.input)
		}
	}
	attempts := attemptCounts(t, pool, queueID)
	for _, r := range all {
		if n := attempts[r.id]["COMPLETED"]; n != 1 {
			t.Errorf("task %s has %d COMPLETED attempts (%v), want exactly 1", r.id, n, attempts[r.id])
		}
	}
	events := queueEvents(t, pool, queueID)
	succeeded := map[string]int{}
	for i, e := range events {
		if e.sequence != uint64(i+1) {
			t.Fatalf("result log: event %d has sequence %d; sequences must run from 1 without gaps", i+1, e.sequence)
		}
		switch e.typ {
		case "task.succeeded":
			succeeded[e.taskID]++
		case "task.requeued":
		default:
			t.Errorf("result log: sequence %d is %s for task %s; only task.succeeded and task.requeued are expected", e.sequence, e.typ, e.taskID)
		}
	}
	for _, r := range all {
		if succeeded[r.id] != 1 {
			t.Errorf("task %s has %d task.succeeded events, want exactly 1", r.id, succeeded[r.id])
		}
	}
	if len(succeeded) != len(all) {
		t.Errorf("task.succeeded events name %d tasks, the queue holds %d", len(succeeded), len(all))
	}
}

// summarize describes attempt and event counts for the test log.
func summarize(t testing.TB, pool *sql.DB, queueID string) string {
	t.Helper()
	byState := map[string]int{}
	for _, states := range attemptCounts(t, pool, queueID) {
		for s, n := range states {
			byState[s] += n
		}
	}
	byType := map[string]int{}
	for _, e := range queueEvents(t, pool, queueID) {
		byType[e.typ]++
	}
	return fmt.Sprintf("attempts by state %v; events by type %v", byState, byType)
}
