package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// K-12: `receiver prune` deletes the Inbox records of events below the
// subscription's redelivery_horizon and no others: not the records at or
// above it, not another receiving purpose's, not the task views. Run again
// it deletes nothing.
func TestK12_PruneDeletesOnlyRecordsBelowTheHorizon(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	p := startPlatform(t)
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	if sub.RedeliveryHorizon == nil {
		t.Skip("the server does not report redelivery_horizon yet (K-12 server part); prune refuses to run without it")
	}
	name, other := newConsumer(), newConsumer()
	stores := []*inbox.Store{}
	for _, n := range []string{name, other} {
		s, err := inbox.NewStore(env.receiver, n, c.QueueID)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}

	// Three events, each applied by both purposes.
	var sequences []uint64
	var events []string
	for range 3 {
		taskID := c.cancelledTask(t, ctx)
		d := deliveryOf(t, ctx, sub.ID, taskID, "materialised", func(delivery) bool { return true })
		detail, err := c.client.GetEventDelivery(ctx, sub.ID, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(detail.Event)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stores {
			if _, err := s.Apply(ctx, raw); err != nil {
				t.Fatal(err)
			}
		}
		sequences = append(sequences, detail.Event.Sequence)
		events = append(events, detail.Event.ID)
	}

	// Retention has passed the first two events: the horizon is the third.
	if _, err := env.platform.ExecContext(ctx, `UPDATE queue_streams SET retention_mark = ? WHERE queue_id = ?`, sequences[2], c.QueueID); err != nil {
		t.Fatal(err)
	}
	got, err := c.client.GetSubscription(ctx, sub.ID)
	if err != nil || got.RedeliveryHorizon == nil || *got.RedeliveryHorizon != sequences[2] {
		t.Fatalf("subscription = %+v, %v; want redelivery_horizon %d", got, err, sequences[2])
	}

	cfg := &receiver.Config{Credentials: c.Credentials, ReceiverDSN: env.receiverDSN, ReceiverName: name, SubscriptionID: sub.ID}
	var out bytes.Buffer
	if err := receiver.Prune(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("pruned=2 redelivery_horizon=%d subscription=%s\n", sequences[2], sub.ID); out.String() != want {
		t.Errorf("prune printed %q, want %q", out.String(), want)
	}
	for i, id := range events {
		_, found := inboxApplied(t, ctx, name, c.QueueID, id)
		if below := i < 2; found == below {
			t.Errorf("event %d (sequence %d, horizon %d): Inbox record found=%v after prune", i, sequences[i], sequences[2], found)
		}
		if _, found := inboxApplied(t, ctx, other, c.QueueID, id); !found {
			t.Errorf("event %d: the other purpose's record was pruned", i)
		}
	}
	var views int
	if err := env.receiver.QueryRowContext(ctx, `SELECT COUNT(*) FROM receiver_task_views WHERE consumer_name = ?`, name).Scan(&views); err != nil || views != 3 {
		t.Errorf("task views after prune: %d, %v; want all 3 kept", views, err)
	}

	out.Reset()
	if err := receiver.Prune(ctx, cfg, &out); err != nil || out.String() != fmt.Sprintf("pruned=0 redelivery_horizon=%d subscription=%s\n", sequences[2], sub.ID) {
		t.Errorf("prune again = %q, %v; want nothing pruned", out.String(), err)
	}
}
