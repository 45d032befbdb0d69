package tasks

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// closed reports whether a signal's channel has been closed. The store
// notifies before its call returns, so no wait is needed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestStoreAnnouncesItsOwnCommits: the owner of a fact announces it. The
// store wakes the waiters of Appended after its own commit of an append,
// of Submitted when a task became PENDING, and nobody when nothing
// changed; callers never notify.
func TestStoreAnnouncesItsOwnCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CompletionWakesAWaiterAfterItsCommit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, 1)
		a := leaseOne(t, f, false, 1)
		before, err := StreamGet(ctx, f.db, f.queues[0])
		if err != nil {
			t.Fatal(err)
		}
		appended, submitted := f.store.Appended(), f.store.Submitted()
		// A waiter on another connection sees the append once woken: the
		// signal comes after the COMMIT, not before.
		seen := make(chan uint64, 1)
		go func() {
			<-appended
			s, err := StreamGet(ctx, f.db, f.queues[0])
			if err != nil {
				t.Error(err)
			}
			seen <- s.Head
		}()
		if _, _, err := f.store.AttemptComplete(ctx, &AttemptCompleteParams{Proof: proofOf(a), Grant: f.grant(f.queues[0]), Outcome: OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
		select {
		case head := <-seen:
			if head != before.Head+1 {
				t.Fatalf("woken waiter read head %d, want %d", head, before.Head+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a completion through the store did not wake the appended waiter")
		}
		if closed(submitted) {
			t.Fatal("a success woke the submitted waiters")
		}
	})

	t.Run("RequeueWakesSubmitted", func(t *testing.T) {
		t.Parallel()
		f := setup(t, 1)
		a := leaseOne(t, f, true, 3)
		appended, submitted := f.store.Appended(), f.store.Submitted()
		_, ev, err := f.store.AttemptComplete(ctx, &AttemptCompleteParams{Proof: proofOf(a), Grant: f.grant(f.queues[0]), Outcome: OutcomeFailed, ErrorCode: "E"})
		if err != nil || ev == nil || ev.Type != EventRequeued {
			t.Fatalf("complete: %v, %+v; want task.requeued", err, ev)
		}
		if !closed(appended) || !closed(submitted) {
			t.Fatalf("appended woken %v, submitted woken %v; want both", closed(appended), closed(submitted))
		}
	})

	t.Run("ReleaseAndExpiryWakeBoth", func(t *testing.T) {
		t.Parallel()
		f := setup(t, 1)
		a := leaseOne(t, f, true, 3)
		appended, submitted := f.store.Appended(), f.store.Submitted()
		if _, err := f.store.AttemptRelease(ctx, proofPtr(a), "not started"); err != nil {
			t.Fatal(err)
		}
		if !closed(appended) || !closed(submitted) {
			t.Fatal("a release did not wake appended and submitted")
		}
		// The released task is leased again and its lease runs out.
		session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: f.queues[0], CredentialID: f.worker, Capacity: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.Exec(`UPDATE tasks SET available_at = ? WHERE id = ?`, time.Now().Add(-time.Hour), a.Task.ID); err != nil {
			t.Fatal(err)
		}
		again, _, err := f.store.AttemptLease(ctx, session, f.grant(f.queues[0]), -time.Second)
		if err != nil || len(again) != 1 {
			t.Fatalf("lease again: %v, %d", err, len(again))
		}
		appended, submitted = f.store.Appended(), f.store.Submitted()
		if events, err := f.store.attemptRecover(ctx, 10); err != nil || len(events) != 1 {
			t.Fatalf("expire: %v, %d events", err, len(events))
		}
		if !closed(appended) || !closed(submitted) {
			t.Fatal("an expiry did not wake appended and submitted")
		}
	})

	t.Run("NothingChangedWakesNobody", func(t *testing.T) {
		t.Parallel()
		f := setup(t, 1)
		a := leaseOne(t, f, false, 1)
		appended := f.store.Appended()
		lost := proofOf(a)
		lost.LeaseSecret = "wrong"
		if _, _, err := f.store.AttemptComplete(ctx, &AttemptCompleteParams{Proof: lost, Grant: f.grant(f.queues[0]), Outcome: OutcomeSucceeded}); !errors.Is(err, errLeaseLost) {
			t.Fatalf("complete with a wrong secret: %v, want TASK_LEASE_LOST", err)
		}
		if closed(appended) {
			t.Fatal("a completion that changed nothing woke the appended waiters")
		}
	})

	t.Run("TxAnnouncesOnlyAfterACommit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, 1)
		appended, submitted, cancels := f.store.Appended(), f.store.Submitted(), f.store.CancelRequested()
		failed := errors.New("rolled back")
		if err := f.store.Tx(ctx, func(*sql.Tx) error { return failed }); !errors.Is(err, failed) {
			t.Fatalf("Tx = %v, want the function's error", err)
		}
		if closed(appended) || closed(submitted) || closed(cancels) {
			t.Fatal("a rolled-back Tx woke waiters")
		}
		ids := f.submit(t, f.queues[0], 1, false, 1)
		if err := f.store.Tx(ctx, func(tx *sql.Tx) error { _, _, err := TaskCancel(ctx, tx, ids[0], ""); return err }); err != nil {
			t.Fatal(err)
		}
		if !closed(appended) || !closed(submitted) || !closed(cancels) {
			t.Fatal("a committed Tx did not wake every waiter")
		}
	})
}

func proofOf(a Assignment) Proof {
	return Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret}
}

func proofPtr(a Assignment) *Proof {
	p := proofOf(a)
	return &p
}
