//go:build linux

package acceptance_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/netproxy"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

const (
	// nodeCount is how many orbit serve processes share the database;
	// victim is the one killed.
	nodeCount = 3
	victim    = 0
	// nodeLease is the worker and event lease of every node: short, so
	// that what the dead node held comes back within seconds.
	nodeLease = 3 * time.Second
	// nodeRate is how many tasks each node's producer submits per second.
	nodeRate = 10
	// nodeCapacity is the capacity of every worker and consumer
	// connection.
	nodeCapacity = 4
	// nodeTaskWork is how long a task's handler works, so that the kill
	// finds tasks in their handlers.
	nodeTaskWork = 20 * time.Millisecond
	// afterKill is how long the producers go on submitting after the kill.
	afterKill = 4 * time.Second
	// nodeWait bounds every wait of the test; it only turns a hang into a
	// failure.
	nodeWait = 90 * time.Second
	// inboxName is the receiving purpose of the three consumers: one
	// Inbox deduplicates what any of them receives.
	inboxName = "node-death"
)

// TestN5_NodeDeath runs three orbit serve processes on one database; on
// each, an SDK worker completes tasks that producers submit steadily
// through all three, and an SDK consumer applies the results of one
// subscription through the result-inbox example's Inbox. Each client
// reaches its node through a proxy that, like a load balancer, sends new
// connections to a surviving node once its own refuses them.
//
// The victim's consumer holds its whole capacity in handlers that have not
// stored their events, and the victim is killed with SIGKILL. Its clients
// reconnect to the survivors; the leases it held are not extended by
// anyone, run out, and are delivered again. Then, in the database: every
// task submitted ended SUCCEEDED with exactly one completed attempt and one
// result (nothing lost, nothing completed twice), every result has exactly
// one delivery, ACKED once, and is applied exactly once in the Inbox, and
// every delivery the dead node held was leased again after its lease ran
// out and acknowledged with that later lease (N-5).
func TestN5_NodeDeath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := orbitproc.Build(t, dir, raceEnabled)
	dsn := testdb.NewDSN(t)
	pool := openDB(t, dsn)
	queueID, token := newCredential(t, pool, auth.AllPermissions...)
	store, recvPool := receiverInbox(t, queueID)

	nodes := make([]*orbitproc.Process, nodeCount)
	addrs := make([]string, nodeCount)
	for i := range nodes {
		addrs[i] = orbitproc.FreeAddr(t)
	}
	for i := range nodes {
		nodes[i] = orbitproc.Start(t, orbitproc.Serve{Bin: bin, Dir: dir, Addr: addrs[i], DSN: dsn, Env: shortLeaseEnv()})
	}
	// The clients of node i fall back to the next nodes in turn.
	urls := make([]string, nodeCount)
	for i := range nodes {
		urls[i] = netproxy.Start(t, addrs[i], addrs[(i+1)%nodeCount], addrs[(i+2)%nodeCount]).URL()
	}
	clients := make([]*orbit.Client, nodeCount)
	for i := range clients {
		c, err := orbit.NewClient(urls[i], token, orbit.WithHTTPClient(newHTTPClient(t, 1)))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	created, err := clients[1].CreateSubscription(context.Background(), "node-death", orbit.CreateSubscriptionRequest{
		Name: "node-death", QueueID: queueID, Types: []string{orbit.EventTypeTaskSucceeded},
		MaxPending: 1000, MaxAttempts: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	subID := created.Subscription.ID

	backoff := orbit.BackoffConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	var worked [nodeCount]atomic.Int64
	workers := make([]*workerGroup, nodeCount)
	for i := range workers {
		workers[i] = startWorkers(t, 1, orbit.WorkerConfig{
			BaseURL: urls[i], Token: token, QueueID: queueID, Capacity: nodeCapacity,
			Backoff: backoff, ShutdownTimeout: 5 * time.Second, Logger: quietLogger(),
		}, func(ctx context.Context, task *orbit.AssignedTask) orbit.Outcome {
			select {
			case <-time.After(nodeTaskWork):
			case <-ctx.Done():
				return orbit.Release("worker stopping")
			}
			worked[i].Add(1)
			return orbit.Succeeded(task.Input)
		})
	}

	// Once armed, the victim's consumer holds its next nodeCapacity
	// deliveries in their handlers, before they are stored, until the
	// test releases them or their lease runs out.
	hold := newDeliveryHold(nodeCapacity)
	t.Cleanup(hold.releaseAll)
	var handled [nodeCount]atomic.Int64
	var outcomes sync.Map // receiver.Outcome → *atomic.Int64
	consumers := make([]*consumerGroup, nodeCount)
	for i := range consumers {
		consumers[i] = startConsumerGroup(t, orbit.EventConsumerConfig{
			BaseURL: urls[i], Token: token, SubscriptionID: subID, Capacity: nodeCapacity,
			// Room for new deliveries while held handlers wait.
			Concurrency: 2 * nodeCapacity,
			// Nobody extends the held leases: they run out.
			MaxLeaseExtension: -1,
			Backoff:           backoff, ShutdownTimeout: 5 * time.Second, Logger: quietLogger(),
		}, func(ctx context.Context, d *orbit.Delivery) error {
			if i == victim {
				if err := hold.wait(ctx, d); err != nil {
					return err
				}
			}
			raw, err := receiver.EventJSON(d)
			if err != nil {
				return err
			}
			res, err := store.Apply(ctx, raw)
			n, _ := outcomes.LoadOrStore(receiver.Classify(res, err), &atomic.Int64{})
			n.(*atomic.Int64).Add(1)
			if err != nil {
				return err
			}
			handled[i].Add(1)
			return nil
		})
	}

	producers := startNodeProducers(t, clients, queueID)
	describe := func() string {
		return fmt.Sprintf("submitted %d; tasks %v; worked %v; handled %v", producers.submitted(), stateCounts(t, pool, queueID),
			loadAll(worked[:]), loadAll(handled[:]))
	}
	eventually(t, nodeWait, "every node's worker and consumer busy", func() bool {
		for i := range nodeCount {
			if worked[i].Load() == 0 || handled[i].Load() == 0 {
				return false
			}
		}
		return true
	}, describe)

	hold.arm()
	held := hold.full(t, nodeWait)
	nodes[victim].Kill(t)
	killedAt := time.Now()
	leases := heldLeases(t, pool, held)
	t.Logf("killed node %d holding %d deliveries in its consumer's handlers; %s", victim, len(leases), describe())

	workedAtKill, handledAtKill := worked[victim].Load(), handled[victim].Load()
	time.Sleep(afterKill) // the survivors take the victim's clients under load
	eventually(t, nodeWait, "the dead node's worker and consumer working again through a survivor", func() bool {
		return worked[victim].Load() > workedAtKill && handled[victim].Load() > handledAtKill
	}, describe)
	producers.stop()
	if err := producers.err(); err != nil {
		t.Fatalf("a producer gave up: %v", err)
	}
	submitted := producers.submitted()

	// The held leases are redelivered once they run out; only then are
	// the held handlers let go: their ACKs carry a stale proof.
	eventually(t, nodeWait, "every held delivery leased again", func() bool {
		for id, l := range leases {
			if deliveryEpoch(t, pool, id) <= l.epoch {
				return false
			}
		}
		return true
	}, describe)
	hold.releaseAll()
	eventually(t, nodeWait, "every task SUCCEEDED and every result ACKED", func() bool {
		return stateCounts(t, pool, queueID)[orbit.TaskStateSucceeded] == submitted && ackedCount(t, pool, subID) == submitted
	}, func() string { return fmt.Sprintf("%s; ACKED %d", describe(), ackedCount(t, pool, subID)) })
	t.Logf("drained %s after the kill", time.Since(killedAt).Round(time.Second))

	for i := range nodeCount {
		consumers[i].stop(t)
		workers[i].stop(t)
	}
	for i, n := range nodes {
		if i != victim {
			n.Stop(t)
		}
		n.CheckNoRace(t)
	}

	checkSucceededOnce(t, pool, queueID, submitted)
	events := succeededEvents(t, pool, queueID)
	deliveries := subscriptionDeliveries(t, pool, subID)
	checkDeliveredOnce(t, events, deliveries)
	checkAppliedOnce(t, recvPool, queueID, events)
	for id, l := range leases {
		d := deliveries[l.eventID]
		switch {
		case d.id != id:
			t.Errorf("held delivery %s: the event's delivery is %s", id, d.id)
		case d.attempts <= l.attempts || d.ackEpoch <= l.epoch:
			t.Errorf("held delivery %s (attempt %d, epoch %d) ended attempt %d, ACKed with epoch %d: not delivered again",
				id, l.attempts, l.epoch, d.attempts, d.ackEpoch)
		case l.until.Valid && !d.ackedAt.After(l.until.Time):
			t.Errorf("held delivery %s was ACKed at %s, before its lease of the dead node ran out at %s", id, d.ackedAt, l.until.Time)
		}
	}
	var outs []string
	outcomes.Range(func(k, v any) bool {
		outs = append(outs, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d tasks on %d nodes, worked %v, handled %v, Inbox outcomes [%s]; %s",
		submitted, nodeCount, loadAll(worked[:]), loadAll(handled[:]), strings.Join(outs, " · "), summarize(t, pool, queueID))
}

// shortLeaseEnv returns the settings of an orbit serve process whose
// leases run out within nodeLease and whose background loops run often, so
// that what a dead node or a lost database connection held comes back
// within seconds.
func shortLeaseEnv() []string {
	return []string{
		"ORBIT_WORKERS_LEASE_DURATION=" + nodeLease.String(),
		"ORBIT_WORKERS_HEARTBEAT_INTERVAL=1s",
		"ORBIT_WORKERS_POLL_INTERVAL=100ms",
		"ORBIT_TASKS_SWEEP_INTERVAL=200ms",
		"ORBIT_EVENTS_LEASE_DURATION=" + nodeLease.String(),
		"ORBIT_EVENTS_POLL_INTERVAL=100ms",
		"ORBIT_SUBSCRIPTIONS_RECOVER_INTERVAL=200ms",
		"ORBIT_SUBSCRIPTIONS_MATERIALIZE_INTERVAL=100ms",
	}
}

// receiverInbox creates the result-inbox example's schema in a database of
// its own and returns the Inbox of inboxName on queueID and the database.
func receiverInbox(t *testing.T, queueID string) (*inbox.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	pool, err := receiver.OpenReceiverDB(ctx, testdb.NewEmpty(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	for _, stmt := range receiver.Statements(resultinbox.Schema) {
		if _, err := pool.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("receiver schema: %v", err)
		}
	}
	store, err := inbox.NewStore(pool, inboxName, queueID)
	if err != nil {
		t.Fatal(err)
	}
	return store, pool
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func loadAll(ns []atomic.Int64) []int64 {
	out := make([]int64, len(ns))
	for i := range ns {
		out[i] = ns[i].Load()
	}
	return out
}

// deliveryHold holds a consumer's deliveries in their handlers: once armed,
// the next n handler calls wait until released or until their context
// ends (the SDK ends it when the lease runs out).
type deliveryHold struct {
	slots   chan struct{}
	held    chan orbit.AckProof
	armed   atomic.Bool
	release chan struct{}
	once    sync.Once
}

func newDeliveryHold(n int) *deliveryHold {
	return &deliveryHold{slots: make(chan struct{}, n), held: make(chan orbit.AckProof, n), release: make(chan struct{})}
}

// arm makes the next n handler calls wait.
func (h *deliveryHold) arm() {
	for range cap(h.slots) {
		h.slots <- struct{}{}
	}
	h.armed.Store(true)
}

// wait holds d if a slot is left, and returns once it may go on.
func (h *deliveryHold) wait(ctx context.Context, d *orbit.Delivery) error {
	if !h.armed.Load() {
		return nil
	}
	select {
	case <-h.slots:
	default:
		return nil
	}
	h.held <- d.Proof
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// full waits until every slot holds a delivery and returns their proofs.
func (h *deliveryHold) full(t *testing.T, timeout time.Duration) []orbit.AckProof {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var out []orbit.AckProof
	for len(out) < cap(h.held) {
		select {
		case p := <-h.held:
			out = append(out, p)
		case <-timer.C:
			t.Fatalf("within %s only %d of %d deliveries were held", timeout, len(out), cap(h.held))
		}
	}
	return out
}

// releaseAll lets every held handler go on. Calling it again does nothing.
func (h *deliveryHold) releaseAll() { h.once.Do(func() { close(h.release) }) }

// heldLease is a delivery's lease as the dead node left it.
type heldLease struct {
	eventID  string
	epoch    uint64
	attempts int
	until    sql.NullTime // NULL when the lease had already run out and been recovered
}

// heldLeases reads the leases of the held deliveries after the kill. Each
// still has the held proof's epoch: LEASED, or, on a machine slow enough
// that its lease ran out before the kill, recovered but not leased again.
// A delivery leased again before the kill was no longer the dead node's and
// is left out. No connection of the dead node holds other leases.
func heldLeases(t *testing.T, pool *sql.DB, held []orbit.AckProof) map[string]heldLease {
	t.Helper()
	out := map[string]heldLease{}
	sessions := map[string]bool{}
	for _, p := range held {
		var l heldLease
		var state string
		var session sql.NullString
		err := pool.QueryRow(`SELECT event_id, state, lease_epoch, attempts, lease_until, lease_session_id FROM event_deliveries WHERE id = ?`,
			p.DeliveryID).Scan(&l.eventID, &state, &l.epoch, &l.attempts, &l.until, &session)
		if err != nil {
			t.Fatalf("held delivery %s: %v", p.DeliveryID, err)
		}
		switch {
		case l.epoch > p.Epoch:
			t.Logf("held delivery %s was leased again before the kill (epoch %d, held %d); left out", p.DeliveryID, l.epoch, p.Epoch)
			continue
		case state == orbit.DeliveryStateAcked || state == orbit.DeliveryStateExpired:
			t.Fatalf("held delivery %s is %s after the kill, but its handler never returned", p.DeliveryID, state)
		}
		out[p.DeliveryID] = l
		if session.Valid && state == orbit.DeliveryStateLeased {
			sessions[session.String] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("every held delivery was leased again before the kill: the machine is too slow for a %s lease", nodeLease)
	}
	for s := range sessions {
		var n int
		if err := pool.QueryRow(`SELECT COUNT(*) FROM event_deliveries WHERE lease_session_id = ? AND state = 'LEASED'`, s).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > len(held) {
			t.Fatalf("the dead node's connection %s holds %d leases, more than the %d held", s, n, len(held))
		}
	}
	return out
}

func deliveryEpoch(t *testing.T, pool *sql.DB, id string) uint64 {
	t.Helper()
	var epoch uint64
	if err := pool.QueryRow(`SELECT lease_epoch FROM event_deliveries WHERE id = ?`, id).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	return epoch
}

func ackedCount(t *testing.T, pool *sql.DB, subID string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(`SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED'`, subID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// succeededEvents returns the task.succeeded events of a queue: event →
// task.
func succeededEvents(t *testing.T, pool *sql.DB, queueID string) map[string]string {
	t.Helper()
	rows, err := pool.Query(`SELECT id, task_id FROM result_events WHERE queue_id = ? AND type = 'task.succeeded'`, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, task string
		if err := rows.Scan(&id, &task); err != nil {
			t.Fatal(err)
		}
		out[id] = task
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// subDelivery is a delivery with its ACK record.
type subDelivery struct {
	id, state string
	attempts  int
	n         int // deliveries of the event
	ackEpoch  uint64
	ackedAt   time.Time
	acks      int
}

// subscriptionDeliveries returns a subscription's deliveries by event.
func subscriptionDeliveries(t *testing.T, pool *sql.DB, subID string) map[string]subDelivery {
	t.Helper()
	rows, err := pool.Query(`SELECT d.id, d.event_id, d.state, d.attempts, a.epoch, a.acknowledged_at
		FROM event_deliveries d LEFT JOIN delivery_acks a ON a.delivery_id = d.id WHERE d.subscription_id = ?`, subID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]subDelivery{}
	for rows.Next() {
		var d subDelivery
		var eventID string
		var epoch sql.NullInt64
		var at sql.NullTime
		if err := rows.Scan(&d.id, &eventID, &d.state, &d.attempts, &epoch, &at); err != nil {
			t.Fatal(err)
		}
		if epoch.Valid {
			d.ackEpoch, d.ackedAt, d.acks = uint64(epoch.Int64), at.Time, 1
		}
		d.n = out[eventID].n + 1
		out[eventID] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkDeliveredOnce checks that every result has exactly one delivery,
// ACKED with one ACK record, and that nothing else was delivered.
func checkDeliveredOnce(t *testing.T, events map[string]string, deliveries map[string]subDelivery) {
	t.Helper()
	for id := range events {
		d, ok := deliveries[id]
		switch {
		case !ok:
			t.Errorf("result %s was never delivered", id)
		case d.n != 1 || d.state != orbit.DeliveryStateAcked || d.acks != 1:
			t.Errorf("result %s: %d deliveries, the last %s with %d ACK records; want one, ACKED once", id, d.n, d.state, d.acks)
		}
	}
	if len(deliveries) != len(events) {
		t.Errorf("the subscription delivered %d events, the log holds %d results", len(deliveries), len(events))
	}
}

// checkAppliedOnce checks in the receiver's database that the Inbox of
// inboxName holds every result once, applied, and nothing else, and that
// each task's view advanced exactly once.
func checkAppliedOnce(t *testing.T, pool *sql.DB, queueID string, events map[string]string) {
	t.Helper()
	rows, err := pool.Query(`SELECT event_id, applied FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ?`, inboxName, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := map[string]bool{}
	for rows.Next() {
		var id string
		var applied bool
		if err := rows.Scan(&id, &applied); err != nil {
			t.Fatal(err)
		}
		stored[id] = applied
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range events {
		if applied, ok := stored[id]; !ok || !applied {
			t.Errorf("result %s: in the Inbox %v, applied %v; want applied", id, ok, applied)
		}
	}
	if len(stored) != len(events) {
		t.Errorf("the Inbox holds %d events, the log %d results", len(stored), len(events))
	}
	views, err := pool.Query(`SELECT task_id, applied_events FROM receiver_task_views WHERE consumer_name = ? AND queue_id = ?`, inboxName, queueID)
	if err != nil {
		t.Fatal(err)
	}
	defer views.Close()
	n := 0
	for views.Next() {
		var task string
		var applied int
		if err := views.Scan(&task, &applied); err != nil {
			t.Fatal(err)
		}
		n++
		if applied != 1 {
			t.Errorf("the view of task %s advanced %d times, want once", task, applied)
		}
	}
	if err := views.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(events) {
		t.Errorf("the receiver has %d task views for %d results", n, len(events))
	}
}

// consumerGroup runs one SDK event consumer until stop is called.
type consumerGroup struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startConsumerGroup runs a consumer with cfg and handler. It is stopped,
// and must have returned nil, when stop is called or the test ends.
func startConsumerGroup(t testing.TB, cfg orbit.EventConsumerConfig, handler orbit.EventHandler) *consumerGroup {
	t.Helper()
	c, err := orbit.NewEventConsumer(cfg, handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &consumerGroup{cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- c.Run(ctx) }()
	t.Cleanup(func() { g.stop(t) })
	return g
}

// stop cancels the consumer, waits for Run to return and fails the test on
// an error. Calling it again does nothing.
func (g *consumerGroup) stop(t testing.TB) {
	t.Helper()
	g.once.Do(func() {
		g.cancel()
		if err := <-g.done; err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	})
}

// nodeProducers submit tasks steadily, nodeRate a second through each
// node's client; a submission that fails is sent again with the same
// idempotency key until it is accepted, so every task a producer began
// exists exactly once.
type nodeProducers struct {
	queueID  string
	timeout  time.Duration       // of one SubmitTask call
	observe  func(submitAttempt) // nil, or called after every attempt
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	mu       sync.Mutex
	lastErr  error // of a task given up after nodeWait
}

// submitAttempt is one SubmitTask call of a producer.
type submitAttempt struct {
	key          string
	began, ended time.Time
	res          *orbit.TaskResult // nil when err is set
	err          error
}

func startNodeProducers(t *testing.T, clients []*orbit.Client, queueID string) *nodeProducers {
	return startObservedProducers(t, clients, queueID, 10*time.Second, nil)
}

// startObservedProducers is startNodeProducers with a timeout for each
// SubmitTask call, after which the call fails and is sent again, and
// observe called after every call, from the producers' goroutines.
func startObservedProducers(t *testing.T, clients []*orbit.Client, queueID string, timeout time.Duration, observe func(submitAttempt)) *nodeProducers {
	ctx, cancel := context.WithCancel(context.Background())
	p := &nodeProducers{queueID: queueID, timeout: timeout, observe: observe, cancel: cancel}
	for i, client := range clients {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			tick := time.NewTicker(time.Second / nodeRate)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				p.submit(client, fmt.Sprintf("node-%d-%d", i, n))
			}
		}()
	}
	t.Cleanup(p.stop)
	return p
}

// submit sends one task until it is accepted, even after stop, for at
// most nodeWait.
func (p *nodeProducers) submit(client *orbit.Client, key string) {
	for deadline := time.Now().Add(nodeWait); ; {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		began := time.Now()
		res, err := client.SubmitTask(ctx, key, orbit.SubmitTaskRequest{
			QueueID: p.queueID, Input: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key)), Idempotent: true, MaxAttempts: 20,
		})
		cancel()
		if p.observe != nil {
			p.observe(submitAttempt{key: key, began: began, ended: time.Now(), res: res, err: err})
		}
		if err == nil {
			p.accepted.Add(1)
			return
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			p.lastErr = fmt.Errorf("task %s: %w", key, err)
			p.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// err returns why a task was given up, or nil.
func (p *nodeProducers) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// stop ends the submissions and waits for those in flight. Calling it
// again does nothing more.
func (p *nodeProducers) stop() {
	p.cancel()
	p.wg.Wait()
}

func (p *nodeProducers) submitted() int { return int(p.accepted.Load()) }
