//go:build linux

package integration_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// processTestTimeout bounds a test that builds and runs the receiver.
const processTestTimeout = 3 * time.Minute

// consumeLine matches every line `receiver consume` may print: its
// start and stop, and one stable classification per event. Nothing else,
// so no token, lease proof, result body or DSN can appear on a line.
var consumeLine = regexp.MustCompile(`^(consuming subscription=[0-9a-f]{32} queue=[0-9a-f]{32} receiver=[A-Za-z0-9._-]+` +
	`|event=[0-9a-f]{32} type=task\.(succeeded|failed|cancelled|needs_review) outcome=(applied|duplicate|stale|conflict|wrong_queue|invalid_event|commit_unconfirmed|storage_error)` +
	`|stopped subscription=[0-9a-f]{32})$`)

// checkConsumeOutput checks that every line of stdout is one of
// consumeLine's and that neither stdout nor stderr holds any of secrets.
func checkConsumeOutput(t *testing.T, stdout, stderr string, secrets ...string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if !consumeLine.MatchString(line) {
			t.Errorf("consume printed %q, which is not a classification line", line)
		}
	}
	for _, s := range append(secrets, "lease_secret") {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("consume's output holds %q", s)
		}
	}
}

// consume fetches its subscription first and refuses to start when
// the subscription's queue is not the configured one (here ORBIT_QUEUE_ID
// overriding the credentials file): it exits non-zero without opening an
// event connection, so no delivery is leased and no budget is spent.
func TestR6_ConsumeRefusesAnotherQueue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t)
	p := startPlatform(t)
	a := p.bootstrap(t, "inbox-demo")
	b := p.bootstrap(t, "inbox-other")
	sub := a.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	taskID := a.cancelledTask(t, ctx)
	deliveryOf(t, ctx, sub.ID, taskID, "materialised", func(d delivery) bool { return d.State == orbit.DeliveryStatePending })

	name := newConsumer()
	childEnv := append(consumeEnv(a, sub.ID, env.receiverDSN, name, ""), orbit.EnvQueueID+"="+b.QueueID)
	proc := startChild(t, bin, childEnv, "consume")
	if _, err := proc.waitExit(t, 30*time.Second); err == nil {
		t.Fatalf("consume with another queue exited 0:\n%s", proc.stdout)
	}
	want := fmt.Sprintf("receiver: consume: subscription %s belongs to queue %s, not the configured queue %s; refusing to start",
		sub.ID, a.QueueID, b.QueueID)
	if got := strings.TrimSpace(proc.stderr.String()); got != want {
		t.Errorf("consume's error:\n%s\nwant:\n%s", got, want)
	}
	if out := proc.stdout.String(); out != "" {
		t.Errorf("a refused consume printed %q", out)
	}

	d := deliveries(t, ctx, sub.ID)[taskID]
	if d.State != orbit.DeliveryStatePending || d.Attempts != 0 || d.Epoch != 0 {
		t.Errorf("after the refusal the delivery is %+v, want PENDING and never leased", d)
	}
	var sessions int
	if err := env.platform.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE subscription_id = ?`, sub.ID).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != 0 {
		t.Errorf("a refused consume opened %d event connections", sessions)
	}
	if _, _, found := viewOf(t, ctx, name, a.QueueID, taskID); found {
		t.Errorf("a refused consume wrote a view row")
	}
}

// the real `receiver consume` process, with a
// SELECT/INSERT/UPDATE-only account, applies the events it receives and
// prints one classification per event; on SIGTERM it cancels its handler
// that waits on a row lock, exits 0 within 10 s without acknowledging that
// event, and leaves the shared subscription enabled. Its output holds no
// token, lease secret or result body.
func TestR9_ConsumeStopsWithinTenSeconds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t)
	p := startPlatform(t)
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, nil, 0)
	dsn, user := receiverAccount(t, ctx)
	name := newConsumer()

	proc := startChild(t, bin, consumeEnv(c, sub.ID, dsn, name, ""), "consume")
	proc.waitOutput(t, ctx, fmt.Sprintf("consuming subscription=%s queue=%s receiver=%s\n", sub.ID, c.QueueID, name))

	// A few results, two of them with a result body that must never be
	// printed.
	marker := "result-body-" + db.NewID()
	f := setup(t)
	f.workOn(c.NamespaceID, c.QueueID)
	succeeded, _ := f.completed(tasks.OutcomeSucceeded, []byte(`{"note":"`+marker+`","n":1}`))
	failed, _ := f.completed(tasks.OutcomeFailed, []byte(`{"note":"`+marker+`","n":2}`))
	cancelled := c.cancelledTask(t, ctx)
	for _, taskID := range []string{succeeded.ID, failed.ID, cancelled} {
		d := deliveryOf(t, ctx, sub.ID, taskID, "ACKED", func(d delivery) bool { return d.State == orbit.DeliveryStateAcked })
		if applied, _, found := viewOf(t, ctx, name, c.QueueID, taskID); !found || applied != 1 {
			t.Fatalf("task %s acknowledged but its view is found=%v applied_events=%d", taskID, found, applied)
		}
		if want := fmt.Sprintf("event=%s type=", d.EventID); !strings.Contains(proc.stdout.String(), want) {
			t.Errorf("no classification line for event %s", d.EventID)
		}
	}

	// One more event, whose business transaction waits for a row lock the
	// test holds: its handler is in flight when SIGTERM arrives.
	blocked := c.submit(t, ctx)
	holder, err := env.receiver.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, `INSERT INTO receiver_task_views (consumer_name, queue_id, task_id, task_revision,
		last_event_id, last_state, last_result, applied_events, created_at, updated_at)
		VALUES (?, ?, ?, 0, '', '', NULL, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, name, c.QueueID, blocked); err != nil {
		t.Fatal(err)
	}
	c.cancel(t, ctx, blocked)
	waitUntil(t, ctx, "the receiver's INSERT to wait for the held view row", func() bool {
		var waiting int
		if err := env.receiver.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE USER = ? AND INFO LIKE '%INSERT INTO receiver_task_views%'`, user).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})

	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took, err := proc.waitExit(t, receiver.ConsumeStopTimeout+5*time.Second)
	if err != nil {
		t.Errorf("consume exited with %v after SIGTERM, want status 0", err)
	}
	if took > receiver.ConsumeStopTimeout {
		t.Errorf("consume took %s to stop, want at most %s", took, receiver.ConsumeStopTimeout)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}

	d := deliveries(t, ctx, sub.ID)[blocked]
	if d.State == orbit.DeliveryStateAcked || d.AckEpoch.Valid || d.Attempts != 1 {
		t.Errorf("the interrupted event's delivery is %+v; want leased once, never acknowledged", d)
	}
	if _, found := inboxApplied(t, ctx, name, c.QueueID, d.EventID); found {
		t.Errorf("the interrupted event is in the Inbox")
	}
	var enabled bool
	if err := env.platform.QueryRowContext(ctx, `SELECT enabled FROM subscriptions WHERE id = ?`, sub.ID).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if !enabled {
		t.Errorf("stopping one consumer paused the shared subscription")
	}
	stdout := proc.stdout.String()
	if !strings.HasSuffix(stdout, fmt.Sprintf("stopped subscription=%s\n", sub.ID)) {
		t.Errorf("consume's last line is not its stop line:\n%s", stdout)
	}
	checkConsumeOutput(t, stdout, proc.stderr.String(), c.Token, marker)
}
