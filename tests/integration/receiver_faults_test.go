//go:build linux

package integration_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/db"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// shortLease is the event lease of the R-17 tests, so that a redelivery
// comes within seconds.
const shortLease = 2 * time.Second

// stopConsume sends SIGTERM to a `receiver consume` process and checks that
// it exits 0 within its bound and printed only classification lines.
func stopConsume(t *testing.T, p *childProcess, secrets ...string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitExit(t, receiver.ConsumeStopTimeout+5*time.Second); err != nil {
		t.Errorf("consume exited with %v after SIGTERM", err)
	}
	checkConsumeOutput(t, p.stdout.String(), p.stderr.String(), secrets...)
}

// R-17 "ACK reply lost" (with K-13): the consumer commits an event, with
// its ACK intent, and sends its ACK, but the connection is lost before any
// answer and the ACK is never recorded; then the process is gone (SIGKILL)
// before it can send the proof again. A new process with the same receiver
// name, started while the lease stands, sends the stored proof first: the
// delivery is acknowledged with its original epoch-1 proof, the event is
// not delivered again, and the view advanced once. (When the lease is
// lost meanwhile, the redelivery is deduplicated instead:
// TestK13_IntentOfALostLeaseIsClearedAndTheRedeliveryDeduplicated.)
//
// (When the ACK was recorded and only its answer lost, the delivery is
// ACKED and nothing comes again; the SDK's re-send of the same proof on a
// live process is tested in tests/sdk.)
func TestR17_AckReplyLostThenProcessExits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t)
	p := startPlatform(t) // the default 30 s lease stands through the restart
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	name := newConsumer()
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startAckDropper(t, u.Host)

	first := startChild(t, bin, consumeEnv(c, sub.ID, env.receiverDSN, name, proxy.URL()), "consume")
	first.waitOutput(t, ctx, "consuming subscription="+sub.ID)
	taskID := c.cancelledTask(t, ctx)
	select {
	case <-proxy.cut:
	case <-ctx.Done():
		t.Fatal("the first process never sent an ACK")
	}
	first.kill(t)

	d := deliveries(t, ctx, sub.ID)[taskID]
	if d.State == orbit.DeliveryStateAcked || d.AckEpoch.Valid || d.Attempts != 1 || d.Epoch != 1 {
		t.Fatalf("after the lost ACK the delivery is %+v; want attempted once and not acknowledged", d)
	}
	if !strings.Contains(first.stdout.String(), fmt.Sprintf("event=%s type=task.cancelled outcome=applied\n", d.EventID)) {
		t.Fatalf("the first process did not apply the event:\n%s", first.stdout)
	}
	if applied, found := inboxApplied(t, ctx, name, c.QueueID, d.EventID); !found || !applied {
		t.Fatalf("Inbox after the first process: found=%v applied=%v", found, applied)
	}

	intent, found := intentOf(t, ctx, name, sub.ID, d.ID)
	if !found || intent.epoch != 1 {
		t.Fatalf("after the lost ACK the ACK intent is found=%v epoch=%d; want the epoch-1 proof kept", found, intent.epoch)
	}

	second := startChild(t, bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), "consume")
	acked := deliveryOf(t, ctx, sub.ID, taskID, "ACKED by the second process", func(d delivery) bool {
		return d.State == orbit.DeliveryStateAcked
	})
	if acked.ID != d.ID || acked.Attempts != 1 || acked.AckEpoch.Int64 != 1 {
		t.Errorf("after the restart the delivery is %+v; want %s acknowledged with the stored epoch-1 proof", acked, d.ID)
	}
	waitUntil(t, ctx, "the ACK intent cleared", func() bool {
		_, found := intentOf(t, ctx, name, sub.ID, d.ID)
		return !found
	})
	if applied, _, _ := viewOf(t, ctx, name, c.QueueID, taskID); applied != 1 {
		t.Errorf("applied_events = %d after the restart, want 1", applied)
	}
	second.waitOutput(t, ctx, "consuming subscription="+sub.ID)
	stopConsume(t, second, c.Token, intent.secret)
	if n := eventLines(second.stdout.String()); n != 0 {
		t.Errorf("the second process handled %d events; the event must not come again:\n%s", n, second.stdout)
	}
	checkConsumeOutput(t, first.stdout.String(), first.stderr.String(), c.Token)
}

// R-17 "budget exhausted": while the receiver's storage fails (its DSN
// names a database that holds only the ACK intents table, so the consumer
// connects but every Apply fails) every attempt fails and
// nothing is acknowledged; with max_attempts 2 the delivery ends EXPIRED
// and keeps its place in the subscription's window. After the fix (the
// right DSN, the same receiver name) a manual RetryEventDelivery makes it
// PENDING with one more attempt, and the receiver applies and
// acknowledges it. The receiver name never changes.
func TestR17_BudgetExhaustedIsFixedByManualRetry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t)
	p := startPlatform(t, withEventLease(shortLease))
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 2)
	name := newConsumer()
	broken, _ := emptyDatabase(t, ctx)
	brokenPool, err := openReceiver(broken)
	if err != nil {
		t.Fatal(err)
	}
	defer brokenPool.Close()
	if _, err := brokenPool.ExecContext(ctx, receiver.Statements(resultinbox.Schema)[2]); err != nil {
		t.Fatal(err)
	}

	first := startChild(t, bin, consumeEnv(c, sub.ID, broken, name, ""), "consume")
	first.waitOutput(t, ctx, "consuming subscription="+sub.ID)
	taskID := c.cancelledTask(t, ctx)
	expired := deliveryOf(t, ctx, sub.ID, taskID, "EXPIRED", func(d delivery) bool { return d.State == orbit.DeliveryStateExpired })
	if expired.Attempts != 2 || expired.Budget != 2 || expired.AckEpoch.Valid {
		t.Fatalf("expired delivery %+v; want 2 attempts of a budget of 2, no ACK", expired)
	}
	storageError := fmt.Sprintf("event=%s type=task.cancelled outcome=storage_error\n", expired.EventID)
	if n := strings.Count(first.stdout.String(), storageError); n != 2 {
		t.Errorf("the broken receiver printed %d storage errors for the event, want one per attempt (2):\n%s", n, first.stdout)
	}
	current, err := c.client.GetSubscription(ctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if current.PendingCount != 1 {
		t.Errorf("pending_count = %d with the EXPIRED delivery, want 1", current.PendingCount)
	}
	stopConsume(t, first, c.Token)

	// The fix: the receiver's own database, under the same name.
	second := startChild(t, bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), "consume")
	second.waitOutput(t, ctx, "consuming subscription="+sub.ID)
	detail, err := c.client.GetEventDelivery(ctx, sub.ID, expired.ID)
	if err != nil {
		t.Fatal(err)
	}
	retried, err := c.client.RetryEventDelivery(ctx, sub.ID, expired.ID, "it:retry:"+db.NewID(), orbit.RetryEventDeliveryRequest{
		ExpectedRevision: detail.Delivery.Revision, Reason: "receiver database fixed", AdditionalAttempts: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if retried.Delivery.State != orbit.DeliveryStatePending || retried.Delivery.AttemptBudget != 3 {
		t.Errorf("retry answered %+v; want PENDING with a budget of 3", retried.Delivery)
	}
	acked := deliveryOf(t, ctx, sub.ID, taskID, "ACKED after the retry", func(d delivery) bool { return d.State == orbit.DeliveryStateAcked })
	if acked.ID != expired.ID || acked.Attempts != 3 || acked.AckEpoch.Int64 != 3 {
		t.Errorf("after the retry the delivery is %+v; want %s acknowledged at attempt 3", acked, expired.ID)
	}
	second.waitOutput(t, ctx, fmt.Sprintf("event=%s type=task.cancelled outcome=applied\n", expired.EventID))
	if applied, state, _ := viewOf(t, ctx, name, c.QueueID, taskID); applied != 1 || state != "CANCELLED" {
		t.Errorf("view after the retry: applied_events %d, state %s; want 1, CANCELLED", applied, state)
	}
	var names []string
	rows, err := env.receiver.QueryContext(ctx, `SELECT DISTINCT consumer_name FROM receiver_inbox WHERE queue_id = ?`, c.QueueID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if len(names) != 1 || names[0] != name {
		t.Errorf("the queue's events were received under %v, want only %s", names, name)
	}
	var retries int
	if err := env.platform.QueryRowContext(ctx, `SELECT COUNT(*) FROM delivery_retries WHERE delivery_id = ?`, expired.ID).Scan(&retries); err != nil {
		t.Fatal(err)
	}
	if retries != 1 {
		t.Errorf("%d audited retries, want 1", retries)
	}
	stopConsume(t, second, c.Token)
}
