//go:build linux

package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// crashEnv is the environment of the crash consumer of receiver_crash_test
// for a subscription and receiver name; intents makes it store ACK
// intents (K-13) as `receiver consume` does.
func crashEnv(p *platform, c *credential, subscriptionID, name string, intents bool) []string {
	e := []string{
		envCrashConsumer + "=1", envCrashURL + "=" + p.URL, envCrashToken + "=" + c.Token, envCrashSub + "=" + subscriptionID,
		envCrashQueue + "=" + c.QueueID, envCrashDSN + "=" + env.receiverDSN, envCrashName + "=" + name,
	}
	if intents {
		e = append(e, envCrashIntents+"=1")
	}
	return e
}

// ackIntent is a row of receiver_ack_intents.
type ackIntent struct {
	epoch   uint64
	secret  string
	eventID string
}

// intentOf returns the ACK intent a receiver keeps for a delivery, if any.
func intentOf(t *testing.T, ctx context.Context, name, subscriptionID, deliveryID string) (ackIntent, bool) {
	t.Helper()
	var a ackIntent
	err := env.receiver.QueryRowContext(ctx, `SELECT epoch, lease_secret, event_id FROM receiver_ack_intents
		WHERE consumer_name = ? AND subscription_id = ? AND delivery_id = ?`, name, subscriptionID, deliveryID).
		Scan(&a.epoch, &a.secret, &a.eventID)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return a, true
}

// eventLines counts the event lines a `receiver consume` printed.
func eventLines(stdout string) int { return strings.Count(stdout, "event=") }

// K-13, R-17 "killed after commit" with ACK intents, measured: the
// consumer process commits an event together with its delivery's ACK
// intent and is SIGKILLed before its handler returns. The real `receiver
// consume` started next, while the (30 s) lease still stands, sends the
// stored proof first: the delivery is ACKED with the original epoch-1
// proof, the event is never delivered again (1 delivery in all: the
// original), the intent is cleared and the view advanced once.
func TestK13_KilledAfterCommitAcksOnRestartWithoutRedelivery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t) // before the lease starts: the restart must come within it
	p := startPlatform(t)   // the default 30 s event lease
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	name := newConsumer()

	first := startChild(t, os.Args[0], crashEnv(p, c, sub.ID, name, true), "-test.run=^$")
	taskID := c.cancelledTask(t, ctx)
	leased := deliveryOf(t, ctx, sub.ID, taskID, "leased to the first process", func(d delivery) bool {
		return d.State == orbit.DeliveryStateLeased
	})
	first.waitOutput(t, ctx, crashCommitted+leased.EventID)
	intent, found := intentOf(t, ctx, name, sub.ID, leased.ID)
	if !found || intent.epoch != 1 || intent.eventID != leased.EventID || intent.secret == "" {
		t.Fatalf("after the commit the ACK intent is found=%v epoch=%d event=%s; want the epoch-1 proof of event %s",
			found, intent.epoch, intent.eventID, leased.EventID)
	}
	if applied, found := inboxApplied(t, ctx, name, c.QueueID, leased.EventID); !found || !applied {
		t.Fatalf("the Inbox shows found=%v applied=%v after the commit", found, applied)
	}
	first.kill(t)
	if d := deliveries(t, ctx, sub.ID)[taskID]; d.State != orbit.DeliveryStateLeased || d.AckEpoch.Valid {
		t.Fatalf("after the kill the delivery is %+v; want LEASED and not acknowledged", d)
	}

	restarted := time.Now()
	second := startChild(t, bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), "consume")
	acked := deliveryOf(t, ctx, sub.ID, taskID, "ACKED by the restarted receiver", func(d delivery) bool {
		return d.State == orbit.DeliveryStateAcked
	})
	took := time.Since(restarted)
	// The measurement of the R-17 row: how often the event was delivered.
	t.Logf("R-17 killed after commit, lease standing, ACK intents: deliveries of the event = %d (target 1, the original); ACKED %s after the restart",
		acked.Attempts, took.Round(time.Millisecond))
	if acked.ID != leased.ID || acked.Attempts != 1 || acked.Epoch != 1 || acked.AckEpoch.Int64 != 1 {
		t.Errorf("after the restart the delivery is %+v; want %s ACKED with the epoch-1 proof of its only attempt", acked, leased.ID)
	}
	waitUntil(t, ctx, "the ACK intent cleared", func() bool {
		_, found := intentOf(t, ctx, name, sub.ID, leased.ID)
		return !found
	})
	if applied, _, found := viewOf(t, ctx, name, c.QueueID, taskID); !found || applied != 1 {
		t.Errorf("view after the restart: found=%v applied_events=%d, want 1", found, applied)
	}
	second.waitOutput(t, ctx, "consuming subscription="+sub.ID)
	stopConsume(t, second, c.Token, intent.secret)
	if n := eventLines(second.stdout.String()); n != 0 {
		t.Errorf("the restarted receiver handled %d events; the event must not come again:\n%s", n, second.stdout)
	}
	if d := deliveries(t, ctx, sub.ID)[taskID]; d.Attempts != 1 {
		t.Errorf("the delivery was attempted %d times in all, want 1", d.Attempts)
	}
}

// K-13, "otherwise the redelivery is deduplicated as before": the
// consumer commits with an ACK intent and is killed; its lease runs out
// and another connection takes the delivery (epoch 2) and lets it run out
// too. The restarted receiver's stored epoch-1 proof is refused
// (DELIVERY_LEASE_LOST) and its intent cleared; the epoch-3 redelivery is
// a duplicate in the Inbox and is acknowledged with its own proof.
func TestK13_IntentOfALostLeaseIsClearedAndTheRedeliveryDeduplicated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	bin := buildReceiver(t)
	p := startPlatform(t, withEventLease(shortLease))
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	name := newConsumer()

	first := startChild(t, os.Args[0], crashEnv(p, c, sub.ID, name, true), "-test.run=^$")
	taskID := c.cancelledTask(t, ctx)
	leased := deliveryOf(t, ctx, sub.ID, taskID, "leased to the first process", func(d delivery) bool {
		return d.State == orbit.DeliveryStateLeased
	})
	first.waitOutput(t, ctx, crashCommitted+leased.EventID)
	intent, found := intentOf(t, ctx, name, sub.ID, leased.ID)
	if !found || intent.epoch != 1 {
		t.Fatalf("after the commit the ACK intent is found=%v epoch=%d; want epoch 1", found, intent.epoch)
	}
	first.kill(t)

	// A newer lease replaces the stored proof.
	ec, err := orbit.DialEvents(ctx, orbit.EventConnConfig{BaseURL: p.URL, Token: c.Token, SubscriptionID: sub.ID})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ec.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = ec.Close()
	if d.ID != leased.ID || d.Proof.Epoch != 2 {
		t.Fatalf("the second connection got delivery %s epoch %d; want %s epoch 2", d.ID, d.Proof.Epoch, leased.ID)
	}

	second := startChild(t, bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), "consume")
	acked := deliveryOf(t, ctx, sub.ID, taskID, "ACKED by the restarted receiver", func(d delivery) bool {
		return d.State == orbit.DeliveryStateAcked
	})
	if acked.Attempts != 3 || acked.AckEpoch.Int64 != 3 {
		t.Errorf("after the redelivery the delivery is %+v; want ACKED with the epoch-3 proof of attempt 3", acked)
	}
	second.waitOutput(t, ctx, fmt.Sprintf("event=%s type=task.cancelled outcome=duplicate\n", leased.EventID))
	waitUntil(t, ctx, "the refused ACK intent cleared", func() bool {
		_, found := intentOf(t, ctx, name, sub.ID, leased.ID)
		return !found
	})
	if applied, _, _ := viewOf(t, ctx, name, c.QueueID, taskID); applied != 1 {
		t.Errorf("applied_events = %d after the redelivery, want 1", applied)
	}
	stopConsume(t, second, c.Token, intent.secret, d.Proof.LeaseSecret)
}
