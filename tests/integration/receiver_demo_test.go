package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// demoTimeout bounds a test that runs the demo: the demo's own 20 s, its
// consumer's 5 s shutdown and the set-up around it.
const demoTimeout = receiver.DemoTimeout + receiver.DemoShutdownTimeout + 30*time.Second

// demoTaskLine matches the demo's first line and captures the task id.
var demoTaskLine = regexp.MustCompile(`^task=([0-9a-f]{32}) `)

// runDemo runs receiver.Demo with a bootstrapped credential, the receiver
// database dsn and a receiver name of the test's own, and returns its
// output, its log, how long it took and its error.
func runDemo(ctx context.Context, c *credential, dsn, name string) (out, logs string, took time.Duration, err error) {
	var stdout bytes.Buffer
	log := &syncBuffer{}
	start := time.Now()
	err = receiver.Demo(ctx, &receiver.Config{Credentials: c.Credentials, ReceiverDSN: dsn, ReceiverName: name},
		&stdout, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	return stdout.String(), log.String(), time.Since(start), err
}

// checkDemoSucceeded checks everything promise of a successful
// demo run: exactly the two lines, within 20 s; one task.cancelled
// subscription, now paused; its one task CANCELLED; its one delivery ACKED
// at the first attempt; one Inbox record that advanced the view once; and
// nothing deleted: every record the run made is still there.
func checkDemoSucceeded(t *testing.T, ctx context.Context, c *credential, name, out string, took time.Duration) {
	t.Helper()
	m := demoTaskLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output does not start with a task line:\n%s", out)
	}
	taskID := m[1]
	want := fmt.Sprintf("task=%s state=CANCELLED inbox_duplicate=true applied_events=1\nack_confirmed=1 pending=0 subscription_enabled=false\n", taskID)
	if out != want {
		t.Fatalf("demo output:\n%s\nwant exactly:\n%s", out, want)
	}
	if took >= receiver.DemoTimeout {
		t.Errorf("the demo took %s, want less than %s", took, receiver.DemoTimeout)
	}

	// The platform: one subscription to task.cancelled, paused, not
	// deleted; the task; its delivery, acknowledged once.
	var subID, types string
	var enabled bool
	var subs int
	if err := env.platform.QueryRowContext(ctx, `SELECT COUNT(*), MIN(id), MIN(types), MIN(enabled) FROM subscriptions WHERE queue_id = ?`,
		c.QueueID).Scan(&subs, &subID, &types, &enabled); err != nil {
		t.Fatal(err)
	}
	if subs != 1 || types != orbit.EventTypeTaskCancelled || enabled {
		t.Errorf("the queue has %d subscriptions (types %q, enabled %v); want the demo's one, task.cancelled only, paused", subs, types, enabled)
	}
	var state string
	var taskCount int
	if err := env.platform.QueryRowContext(ctx, `SELECT COUNT(*), MIN(state) FROM tasks WHERE queue_id = ?`, c.QueueID).
		Scan(&taskCount, &state); err != nil {
		t.Fatal(err)
	}
	if taskCount != 1 || state != "CANCELLED" {
		t.Errorf("the queue has %d tasks (state %s), want the demo's task, CANCELLED", taskCount, state)
	}
	ds := deliveries(t, ctx, subID)
	d, ok := ds[taskID]
	if len(ds) != 1 || !ok || d.State != orbit.DeliveryStateAcked || d.Attempts != 1 || d.AckEpoch.Int64 != 1 {
		t.Errorf("deliveries = %+v; want one for task %s, ACKED at attempt 1 with epoch 1", ds, taskID)
	}

	// The receiver: one Inbox record, applied, and the view it advanced.
	if applied, found := inboxApplied(t, ctx, name, c.QueueID, d.EventID); !found || !applied {
		t.Errorf("Inbox record of event %s: found %v, applied %v; want it kept, applied", d.EventID, found, applied)
	}
	if applied, state, found := viewOf(t, ctx, name, c.QueueID, taskID); !found || applied != 1 || state != "CANCELLED" {
		t.Errorf("view of task %s: found %v, applied_events %d, state %s; want 1, CANCELLED", taskID, found, applied, state)
	}
	var inboxRows, viewRows int
	if err := env.receiver.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM receiver_inbox WHERE consumer_name = ?),
		(SELECT COUNT(*) FROM receiver_task_views WHERE consumer_name = ?)`, name, name).Scan(&inboxRows, &viewRows); err != nil {
		t.Fatal(err)
	}
	if inboxRows != 1 || viewRows != 1 {
		t.Errorf("receiver %s has %d Inbox and %d view rows, want 1 and 1", name, inboxRows, viewRows)
	}
}

// the demo, against a real server with a bootstrapped
// --event-access credential and the receiver's own orbit_receiver_test,
// prints exactly its two lines within 20 s, pauses its subscription and
// deletes nothing. Its output and log hold no token.
func TestR4_DemoPrintsTheThreeLines(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), demoTimeout)
	defer cancel()
	p := startPlatform(t)
	c := p.bootstrap(t, "inbox-demo")
	name := newConsumer()

	out, logs, took, err := runDemo(ctx, c, env.receiverDSN, name)
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s\nlog:\n%s", err, out, logs)
	}
	checkDemoSucceeded(t, ctx, c, name, out, took)
	if strings.Contains(out+logs, c.Token) {
		t.Errorf("the demo's output or log holds the token")
	}
}

// another program's task on the demo's queue, cancelled while the demo
// runs, is refused: its event is neither applied (no Inbox record, no view
// row) nor acknowledged (its delivery stays un-ACKed). The demo depends on
// a dedicated queue; here it fails with a non-zero outcome and keeps its
// task, subscription and delivery for inspection.
//
// The other task is cancelled by a middleware just before the demo's own
// cancel reaches the server, so its event comes first in the queue's log
// and is the one the demo's consumer (capacity 1) receives.
func TestR5_DemoRefusesAnotherTasksEvent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), demoTimeout)
	defer cancel()
	var (
		other   atomic.Pointer[credential]
		otherID atomic.Value // the other task's id
		armed   atomic.Bool
		failure atomic.Value // an error of the middleware
	)
	armed.Store(true)
	cancelOther := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":cancel") && armed.CompareAndSwap(true, false) {
				id, err := other.Load().cancelledTaskErr(r.Context())
				if err != nil {
					failure.Store(err)
				} else {
					otherID.Store(id)
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	p := startPlatform(t, withMiddleware(cancelOther))
	c := p.bootstrap(t, "inbox-demo")
	other.Store(c)
	name := newConsumer()

	out, logs, took, err := runDemo(ctx, c, env.receiverDSN, name)
	if f := failure.Load(); f != nil {
		t.Fatalf("cancelling the other task: %v", f)
	}
	if err == nil {
		t.Fatalf("the demo succeeded with another task's event on its queue:\n%s", out)
	}
	if took > receiver.DemoTimeout+receiver.DemoShutdownTimeout+2*time.Second {
		t.Errorf("the failing demo took %s, beyond its bounds", took)
	}
	otherTask, _ := otherID.Load().(string)
	if otherTask == "" {
		t.Fatal("the middleware never cancelled the other task")
	}

	var subID string
	var enabled bool
	if err := env.platform.QueryRowContext(ctx, `SELECT id, enabled FROM subscriptions WHERE queue_id = ?`, c.QueueID).
		Scan(&subID, &enabled); err != nil {
		t.Fatal(err)
	}
	ds := deliveries(t, ctx, subID)
	d, ok := ds[otherTask]
	if !ok {
		t.Fatalf("no delivery for the other task; deliveries %+v", ds)
	}
	if want := fmt.Sprintf("event=%s refused=other_task\n", d.EventID); !strings.Contains(out, want) {
		t.Errorf("demo output lacks %q:\n%s", want, out)
	}
	if d.State == orbit.DeliveryStateAcked || d.AckEpoch.Valid || d.Attempts != 1 {
		t.Errorf("the other task's delivery is %+v; want it leased once and never acknowledged", d)
	}
	if _, found := inboxApplied(t, ctx, name, c.QueueID, d.EventID); found {
		t.Errorf("the other task's event is in the Inbox")
	}
	if _, _, found := viewOf(t, ctx, name, c.QueueID, otherTask); found {
		t.Errorf("the other task has a view row")
	}
	// The failed demo keeps what it made: its subscription (not paused),
	// its task and its own delivery.
	if !enabled {
		t.Errorf("the failed demo paused its subscription")
	}
	var tasksKept int
	if err := env.platform.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE queue_id = ? AND state = 'CANCELLED'`, c.QueueID).
		Scan(&tasksKept); err != nil {
		t.Fatal(err)
	}
	if tasksKept != 2 || len(ds) != 2 {
		t.Errorf("after the failed demo the queue has %d cancelled tasks and %d deliveries, want 2 and 2", tasksKept, len(ds))
	}
	if strings.Contains(out+logs, c.Token) {
		t.Errorf("the demo's output or log holds the token")
	}
}
