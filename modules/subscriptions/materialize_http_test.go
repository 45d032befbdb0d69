package subscriptions_test

import (
	"slices"
	"testing"
	"time"

	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

func TestS23_BackgroundMaterialisation(t *testing.T) {
	t.Parallel()
	e := start(t)

	t.Run("TypesAndCursor", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "ns", "types")
		all := e.create(t, c, createBody(c.QueueID, "all", ""))
		failed := e.create(t, c, createBody(c.QueueID, "failed", `,"types":["task.failed"]`))
		review := e.create(t, c, createBody(c.QueueID, "review", `,"types":["task.needs_review","task.succeeded"]`))
		// 1 succeeded, 2 failed, 3 needs_review, 4 requeued, 5 cancelled, 6 cancelled.
		e.completed(t, c, tasks.OutcomeSucceeded)
		e.completed(t, c, tasks.OutcomeFailed)
		e.completed(t, c, tasks.OutcomeNeedsReview)
		e.requeued(t, c)
		e.cancelled(t, c)
		var types []string
		for _, ev := range e.events(t, c.QueueID) {
			types = append(types, ev.Type)
		}
		if want := []string{tasks.EventSucceeded, tasks.EventFailed, tasks.EventNeedsReview, tasks.EventRequeued, tasks.EventCancelled, tasks.EventCancelled}; !slices.Equal(types, want) {
			t.Fatalf("log %v, want %v", types, want)
		}
		for _, tc := range []struct {
			s    subscriptions.SubscriptionView
			want []uint64
		}{
			{all, []uint64{1, 2, 3, 5, 6}}, {failed, []uint64{2}}, {review, []uint64{1, 3}},
		} {
			s := e.waitCursor(t, c, tc.s.ID, 6)
			got := sequences(e.deliveries(t, c, tc.s.ID))
			if !slices.Equal(got, tc.want) || s.PendingCount != len(tc.want) {
				t.Errorf("%s: deliveries %v, pending %d; want %v", tc.s.Name, got, s.PendingCount, tc.want)
			}
		}
	})
	t.Run("FullBacklogStopsTheScan", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "ns", "backlog")
		// 1 cancelled, 2 succeeded, 3 cancelled, 4 succeeded, 5 cancelled, 6 succeeded.
		for range 3 {
			e.cancelled(t, c)
			e.completed(t, c, tasks.OutcomeSucceeded)
		}
		// Created after the log is written, so one scan sees it all.
		s := e.create(t, c, createBody(c.QueueID, "bounded", `,"types":["task.cancelled"],"max_pending":2,"from_sequence":"0"`))
		got := e.waitPending(t, c, s.ID, 2)
		if got.CursorSequence != 4 {
			t.Fatalf("cursor %d, want 4: past the non-matching 4, before 5 that did not fit", got.CursorSequence)
		}
		if seqs := sequences(e.deliveries(t, c, s.ID)); !slices.Equal(seqs, []uint64{1, 3}) {
			t.Fatalf("deliveries %v, want 1 and 3", seqs)
		}
		// ACKing one makes room; nothing was skipped.
		session, l := e.claimOne(t, c, s.ID)
		e.ack(t, s.ID, session, l)
		e.waitCursor(t, c, s.ID, 6)
		if seqs := sequences(e.deliveries(t, c, s.ID)); !slices.Equal(seqs, []uint64{1, 3, 5}) {
			t.Fatalf("deliveries %v, want 1, 3 and 5", seqs)
		}
	})
}

func TestS23_CommitsWakeTheMaterialiser(t *testing.T) {
	t.Parallel()
	// No polling: only the commit's notification can wake the materialiser.
	e := start(t, func(cfg *subscriptions.Config) { cfg.MaterializeInterval = time.Hour })
	c := e.cred(t, "ns", "woken")
	s := e.create(t, c, createBody(c.QueueID, "woken", ""))
	for i := 1; i <= 3; i++ {
		e.cancelled(t, c)
		e.waitPending(t, c, s.ID, i)
	}
}

func TestS24_AttemptBudgetStartsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "budget")
	seven := e.create(t, c, createBody(c.QueueID, "seven", `,"max_attempts":7`))
	byDefault := e.create(t, c, createBody(c.QueueID, "default", ""))
	e.cancelledN(t, c, 2)
	for s, want := range map[string]int{seven.ID: 7, byDefault.ID: 20} {
		e.waitPending(t, c, s, 2)
		for _, d := range e.deliveries(t, c, s) {
			if d.AttemptBudget != want || d.Attempts != 0 {
				t.Errorf("delivery %+v: want attempt_budget %d, attempts 0", d, want)
			}
		}
	}
}

// TestS24_APassWakesTheConnectionsOfTheSubscriptionsItFilled: the
// sequencing pass that creates a subscription's deliveries wakes the event
// connections of that subscription on its node, not every connection
// there, and raises the relayed signal, which wakes every connection of
// the other nodes (it does not say which subscriptions).
func TestS24_APassWakesTheConnectionsOfTheSubscriptionsItFilled(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.cred(t, "ns", "wake-a")
	b := e.cred(t, "ns", "wake-b")
	sa := e.create(t, a, createBody(a.QueueID, "wake-a", ""))
	sb := e.create(t, b, createBody(b.QueueID, "wake-b", ""))
	relayed := e.mod.ClusterSignals()[0].Broadcast
	everyone, forA, forB, published := e.mod.Claimable(), e.mod.ClaimableFor(sa.ID), e.mod.ClaimableFor(sb.ID), relayed.Gen()
	e.cancelled(t, a)
	select {
	case <-forA:
	case <-time.After(waitBound):
		t.Fatalf("the pass that created a delivery of %s did not wake its connections within %v", sa.Name, waitBound)
	}
	select {
	case <-forB:
		t.Fatalf("the connections of %s were woken", sb.Name)
	case <-everyone:
		t.Fatal("every connection of the node was woken")
	default:
	}
	if relayed.Gen() == published {
		t.Fatal("the pass did not raise the signal relayed to the other nodes")
	}
	if got := e.waitPending(t, a, sa.ID, 1); got.PendingCount != 1 {
		t.Fatalf("pending_count %d, want 1", got.PendingCount)
	}
}
