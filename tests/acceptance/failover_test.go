//go:build linux

package acceptance_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/galera"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

const (
	// envGaleraControl is the URL through which a test kills a node of
	// that cluster; make test-galera sets it only for its last phase, in
	// which the tests that kill node 0 run alone.
	envGaleraControl = "ORBIT_TEST_GALERA_CONTROL"

	// failoverNodes is how many orbit serve processes write through node 0
	// and must move to node 1.
	failoverNodes = 2
	// beforeFailover is how long the load runs, every worker and consumer
	// busy, before node 0 is killed.
	beforeFailover = 2 * time.Second
	// afterRecovery is how long the load goes on once submissions,
	// completions and deliveries all work again.
	afterRecovery = 3 * time.Second
	// submitTimeout is how long a producer waits for the answer to a
	// submission before it gives up and sends it again with the same key:
	// less than the time Galera takes to evict a dead node, so that
	// submissions fail in the gap, and some of them after they committed.
	submitTimeout = 2 * time.Second
	// galeraDialTimeout is the dial timeout of the DSNs Orbit gets: a node
	// that does not answer is left after that long.
	galeraDialTimeout = 2 * time.Second
	// switchedLog is what internal/db logs when a pool moves to another DSN.
	switchedLog = "database: switched to another DSN"
	// markedDeadLog is what the cluster module logs when another node
	// marked this one dead.
	markedDeadLog = "this node was marked dead by another node"
	// galeraSummary marks a log line that make test-galera's summary
	// repeats.
	galeraSummary = "galera-summary: "
)

// TestN8_WriteNodeFailoverUnderLoad runs two orbit serve processes with
// database.dsn on node 0 of a 3-node Galera cluster and
// database.failover_dsns on nodes 1 and 2. Producers submit tasks over HTTP
// through both steadily, an SDK worker on each completes them, and an SDK
// consumer on each applies the results of one subscription through the
// result-inbox example's Inbox and ACKs them. Node 0 is killed with SIGKILL
// under that load, which goes on; Orbit must move to node 1 by itself.
//
// It measures, from the kill, the time to the first submission begun after
// the kill that is acknowledged, the first completion of a task assigned
// after the kill, and the first delivery of such a task's result, and
// counts the submissions that failed meanwhile: those were not
// acknowledged, and the producer sends them again with the same
// Idempotency-Key. Then, drained and read through node 1: every
// acknowledged task exists once (one task per key) and SUCCEEDED with one
// completed attempt and one task.succeeded event, the queue's result log
// runs 1..N without gap or repeat, and every result was delivered, ACKed
// once and applied once (N-8). Neither orbit serve may mark the other dead
// over the gap, in which Galera held both heartbeats.
//
// It kills node 0, so it runs only where make test-galera lets it: after
// the other Galera tests, alone, with ORBIT_TEST_MYSQL_DSN on node 1.
func TestN8_WriteNodeFailoverUnderLoad(t *testing.T) {
	nodeDSNs := galeraCluster(t)
	control := os.Getenv(envGaleraControl)
	if control == "" {
		t.Skipf("kills node 0 of the Galera cluster: runs in make test-galera's last phase, which sets %s", envGaleraControl)
	}
	dir := t.TempDir()
	bin := orbitproc.Build(t, dir, raceEnabled)
	dsn := testdb.NewDSN(t)
	orbitDSNs := onEveryNode(t, nodeDSNs, dsn)
	pool := openDB(t, dsn) // node 1: it survives
	queueID, token := newCredential(t, pool, auth.AllPermissions...)
	store, recvPool := receiverInbox(t, queueID)
	waitReplicated(t, orbitDSNs[0], queueID)

	addrs := make([]string, failoverNodes)
	nodes := make([]*orbitproc.Process, failoverNodes)
	clients := make([]*orbit.Client, failoverNodes)
	for i := range nodes {
		addrs[i] = orbitproc.FreeAddr(t)
		nodes[i] = orbitproc.Start(t, orbitproc.Serve{Bin: bin, Dir: dir, Addr: addrs[i], DSN: orbitDSNs[0],
			Env: append(shortLeaseEnv(), "ORBIT_DATABASE_FAILOVER_DSNS="+strings.Join(orbitDSNs[1:], ","))})
		c, err := orbit.NewClient("http://"+addrs[i], token, orbit.WithHTTPClient(newHTTPClient(t, 1)))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	created, err := clients[0].CreateSubscription(context.Background(), "failover", orbit.CreateSubscriptionRequest{
		Name: "failover", QueueID: queueID, Types: []string{orbit.EventTypeTaskSucceeded},
		MaxPending: 1000, MaxAttempts: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	subID := created.Subscription.ID

	rec := &recovery{keys: map[string]string{}, failedKeys: map[string]bool{}, afterKill: map[string]bool{}}
	backoff := orbit.BackoffConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	var worked, handled [failoverNodes]atomic.Int64
	workers := make([]*workerGroup, failoverNodes)
	for i := range workers {
		wl := newWorkerLog()
		wl.onAck = func(taskID string, _ bool) { rec.completed(taskID) }
		workers[i] = startWorkers(t, 1, orbit.WorkerConfig{
			BaseURL: "http://" + addrs[i], Token: token, QueueID: queueID, Capacity: nodeCapacity,
			Backoff: backoff, ShutdownTimeout: 5 * time.Second, Logger: slog.New(wl),
		}, func(ctx context.Context, task *orbit.AssignedTask) orbit.Outcome {
			rec.assigned(task.ID)
			select {
			case <-time.After(nodeTaskWork):
			case <-ctx.Done():
				return orbit.Release("worker stopping")
			}
			worked[i].Add(1)
			return orbit.Succeeded(task.Input)
		})
	}
	consumers := make([]*consumerGroup, failoverNodes)
	for i := range consumers {
		consumers[i] = startConsumerGroup(t, orbit.EventConsumerConfig{
			BaseURL: "http://" + addrs[i], Token: token, SubscriptionID: subID, Capacity: nodeCapacity,
			Backoff: backoff, ShutdownTimeout: 5 * time.Second, Logger: quietLogger(),
		}, func(ctx context.Context, d *orbit.Delivery) error {
			raw, err := receiver.EventJSON(d)
			if err != nil {
				return err
			}
			if _, err := store.Apply(ctx, raw); err != nil {
				return err
			}
			handled[i].Add(1)
			rec.delivered(d.Event.AggregateID)
			return nil
		})
	}

	producers := startObservedProducers(t, clients, queueID, submitTimeout, rec.submitted)
	describe := func() string {
		return fmt.Sprintf("%s; tasks %v; worked %v; handled %v", rec, stateCounts(t, pool, queueID), loadAll(worked[:]), loadAll(handled[:]))
	}
	eventually(t, nodeWait, "every node's worker and consumer busy", func() bool {
		for i := range failoverNodes {
			if worked[i].Load() == 0 || handled[i].Load() == 0 {
				return false
			}
		}
		return true
	}, describe)
	time.Sleep(beforeFailover)

	killGaleraNode(t, control, 0)
	rec.kill(time.Now())
	t.Logf("killed Galera node 0 under load: %s", describe())
	eventually(t, nodeWait, "node 1 in a cluster of 2", func() bool { return clusterSize(t, pool) == 2 }, describe)
	evicted := rec.since(time.Now())
	eventually(t, nodeWait, "submissions, completions and deliveries through node 1", rec.recovered, describe)
	time.Sleep(afterRecovery)
	producers.stop()
	if err := producers.err(); err != nil {
		t.Fatalf("a producer gave up: %v", err)
	}
	acked := rec.acknowledged()
	eventually(t, nodeWait, "every task SUCCEEDED and every result ACKED", func() bool {
		return stateCounts(t, pool, queueID)[orbit.TaskStateSucceeded] == len(acked) && ackedCount(t, pool, subID) == len(acked)
	}, func() string { return fmt.Sprintf("%s; ACKED %d", describe(), ackedCount(t, pool, subID)) })

	for i := range failoverNodes {
		consumers[i].stop(t)
		workers[i].stop(t)
	}
	var switched []string
	for i, n := range nodes {
		n.Stop(t)
		n.CheckNoRace(t)
		at, ok := switchTime(n.Output())
		if !ok {
			t.Errorf("orbit serve %d did not log %q to node 1 (index=1):\n%s", i, switchedLog, n.Output())
			continue
		}
		switched = append(switched, rec.since(at).String())
		if strings.Contains(n.Output(), markedDeadLog) {
			t.Errorf("orbit serve %d was marked dead by the other during the failover: a heartbeat held by Galera looked late", i)
		}
	}

	checkAcknowledgedOnce(t, pool, queueID, acked)
	checkSucceededOnce(t, pool, queueID, len(acked))
	events := succeededEvents(t, pool, queueID)
	checkDeliveredOnce(t, events, subscriptionDeliveries(t, pool, subID))
	checkAppliedOnce(t, recvPool, queueID, events)

	m := rec.measured()
	t.Logf("%d tasks through %d orbit serve processes, worked %v, handled %v; %s",
		len(acked), failoverNodes, loadAll(worked[:]), loadAll(handled[:]), summarize(t, pool, queueID))
	t.Logf("%sN-8 failover to node 1 under load (%d orbit serve, %d tasks): Orbit switched after %s, nodes 1 and 2 evicted node 0 after %s; first acknowledged submit %s after the kill, first completion %s, first delivery %s; %d submits failed in the gap (%d tasks, %d of them found committed by the retry)",
		galeraSummary, failoverNodes, len(acked), strings.Join(switched, " and "), evicted, m.submit, m.complete, m.deliver, m.failed, m.failedKeys, m.committedUnacked)
}

// galeraCluster returns the DSNs of the Galera cluster named by
// ORBIT_TEST_GALERA, node 0 first, or skips the test without one.
func galeraCluster(t *testing.T) []string {
	t.Helper()
	return galera.NodesFromEnv(t, 3)
}

// onEveryNode returns the DSN of dsn's database on each node of nodes, with
// a dial timeout of galeraDialTimeout. dsn must not be on node 0, which the
// test kills.
func onEveryNode(t *testing.T, nodes []string, dsn string) []string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(nodes))
	for i, node := range nodes {
		nc, err := mysql.ParseDSN(node)
		if err != nil {
			t.Fatalf("%s: node %d: %v", galera.EnvNodes, i, err)
		}
		if i == 0 && nc.Addr == cfg.Addr {
			t.Fatalf("%s is node 0 (%s), which this test kills; make test-galera points it at node 1 for this test", testdb.EnvDSN, nc.Addr)
		}
		nc.DBName = cfg.DBName
		nc.Timeout = galeraDialTimeout
		out[i] = nc.FormatDSN()
	}
	return out
}

// waitReplicated waits until node holds the queue the test created through
// another node, so that an orbit serve started on node finds its database,
// schema and credential.
func waitReplicated(t *testing.T, node, queueID string) {
	t.Helper()
	pool := openDB(t, node)
	conn, err := pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// wsrep_sync_wait 1: a read first waits until the node has applied
	// what the cluster committed before it.
	if _, err := conn.ExecContext(context.Background(), "SET SESSION wsrep_sync_wait = 1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM queues WHERE id = ?", queueID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("node 0 holds %d queues %s (%v); want 1", n, queueID, err)
	}
}

// switchTime returns the time of the line in which an orbit serve process
// (text log) says its pool moved to node 1.
func switchTime(output string) (time.Time, bool) {
	for line := range strings.Lines(output) {
		if !strings.Contains(line, switchedLog) || !strings.Contains(line, " index=1 ") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		return at, err == nil
	}
	return time.Time{}, false
}

// clusterSize returns wsrep_cluster_size as the node of pool sees it.
func clusterSize(t *testing.T, pool *sql.DB) int {
	t.Helper()
	var name string
	var n int
	if err := pool.QueryRow("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// killGaleraNode asks make test-galera's control server to kill node i and
// returns once the node's process has exited.
func killGaleraNode(t *testing.T, control string, i int) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/kill?node=%d", control, i), "", nil)
	if err != nil {
		t.Fatalf("kill Galera node %d: %v", i, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("kill Galera node %d: %s", i, resp.Status)
	}
}

// recovery records the load around the kill: the tasks acknowledged to the
// producers, and when each kind of operation first succeeded after the
// kill. Its methods are called from the producers', workers' and
// consumers' goroutines.
type recovery struct {
	mu       sync.Mutex
	killedAt time.Time         // zero before the kill
	keys     map[string]string // idempotency key → task, once acknowledged
	// Submissions: attempts that failed after the kill, and their keys.
	failed     int
	failedKeys map[string]bool
	// Failed keys whose retry found the task created: the attempt that
	// failed had committed, its answer was lost.
	committedUnacked int
	// Tasks whose handler started after the kill.
	afterKill map[string]bool
	// The first acknowledged submit begun after the kill, the first
	// completion and the first delivery of a task assigned after it.
	submit, complete, deliver time.Time
}

func (r *recovery) kill(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killedAt = at
}

func (r *recovery) submitted(a submitAttempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	killed := !r.killedAt.IsZero()
	switch {
	case a.err != nil && killed && a.ended.After(r.killedAt):
		r.failed++
		r.failedKeys[a.key] = true
	case a.err == nil:
		r.keys[a.key] = a.res.Task.ID
		if a.res.Deduplicated && r.failedKeys[a.key] {
			r.committedUnacked++
		}
		if killed && a.began.After(r.killedAt) && r.submit.IsZero() {
			r.submit = a.ended
		}
	}
}

func (r *recovery) assigned(taskID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.killedAt.IsZero() {
		r.afterKill[taskID] = true
	}
}

func (r *recovery) completed(taskID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.afterKill[taskID] && r.complete.IsZero() {
		r.complete = time.Now()
	}
}

func (r *recovery) delivered(taskID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.afterKill[taskID] && r.deliver.IsZero() {
		r.deliver = time.Now()
	}
}

// recovered reports whether submissions, completions and deliveries have
// all succeeded since the kill.
func (r *recovery) recovered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.submit.IsZero() && !r.complete.IsZero() && !r.deliver.IsZero()
}

// acknowledged returns the acknowledged tasks by idempotency key.
func (r *recovery) acknowledged() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.keys))
	for k, v := range r.keys {
		out[k] = v
	}
	return out
}

// recoveryFigures are what the test reports.
type recoveryFigures struct {
	submit, complete, deliver time.Duration
	failed, failedKeys        int
	committedUnacked          int // failed keys whose retry found the task created
}

// measured returns the figures; call it once the producers have stopped.
func (r *recovery) measured() recoveryFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	since := func(at time.Time) time.Duration { return at.Sub(r.killedAt).Round(time.Millisecond) }
	return recoveryFigures{
		submit: since(r.submit), complete: since(r.complete), deliver: since(r.deliver),
		failed: r.failed, failedKeys: len(r.failedKeys), committedUnacked: r.committedUnacked,
	}
}

// since returns how long after the kill at was.
func (r *recovery) since(at time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return at.Sub(r.killedAt).Round(time.Millisecond)
}

func (r *recovery) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("acknowledged %d, submits failed after the kill %d", len(r.keys), r.failed)
}

// checkAcknowledgedOnce checks that the queue holds exactly the tasks
// acknowledged to the producers: one per idempotency key, whichever attempt
// of the key created it, and nothing else.
func checkAcknowledgedOnce(t *testing.T, pool *sql.DB, queueID string, acked map[string]string) {
	t.Helper()
	inQueue := map[string]bool{}
	for _, r := range queueTasks(t, pool, queueID) {
		inQueue[r.id] = true
	}
	keyOf := map[string]string{}
	for key, id := range acked {
		if other, ok := keyOf[id]; ok {
			t.Errorf("keys %s and %s were both answered with task %s", key, other, id)
		}
		keyOf[id] = key
		if !inQueue[id] {
			t.Errorf("acknowledged task %s (key %s) is not in the queue: lost", id, key)
		}
	}
	if len(inQueue) != len(acked) {
		t.Errorf("the queue holds %d tasks for %d acknowledged keys", len(inQueue), len(acked))
	}
}
