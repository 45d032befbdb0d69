package tasks

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// leaseOne submits one task and leases it to a fresh session.
func leaseOne(t *testing.T, f *fixture, idempotent bool, maxAttempts int) Assignment {
	t.Helper()
	ctx := context.Background()
	f.submit(t, f.queues[0], 1, idempotent, maxAttempts)
	session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: f.queues[0], CredentialID: f.worker, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := f.store.AttemptLease(ctx, session, f.grant(f.queues[0]), time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v, %d assignments", err, len(got))
	}
	return got[0]
}

func requestCancel(t *testing.T, f *fixture, taskID string) {
	t.Helper()
	ctx := context.Background()
	if err := db.Tx(ctx, f.db, func(tx *sql.Tx) error { _, _, err := TaskCancel(ctx, tx, taskID, ""); return err }); err != nil {
		t.Fatal(err)
	}
}

func taskState(t *testing.T, f *fixture, id string) *Task {
	t.Helper()
	task, err := TaskGet(context.Background(), f.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func TestT2_CancelRequestedSurvivesAnExpiredLease(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	a := leaseOne(t, f, true, 3)
	requestCancel(t, f, a.Task.ID)
	if _, err := f.db.Exec(`UPDATE task_attempts SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), a.AttemptID); err != nil {
		t.Fatal(err)
	}
	events, err := f.store.attemptRecover(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := taskState(t, f, a.Task.ID)
	if got.State != StateCancelled || !got.EffectUncertain || len(events) != 1 || events[0].Type != EventCancelled {
		t.Fatalf("task %s uncertain=%v events=%v; want CANCELLED, effect_uncertain, one task.cancelled", got.State, got.EffectUncertain, events)
	}
}

func TestT7_FailedAfterCancelRequestIsNotRetried(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	a := leaseOne(t, f, true, 3)
	requestCancel(t, f, a.Task.ID)
	_, ev, err := f.store.AttemptComplete(context.Background(), &AttemptCompleteParams{
		Grant:   f.grant(a.Task.QueueID),
		Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: OutcomeFailed, ErrorCode: "E", ErrorMessage: "stopped",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := taskState(t, f, a.Task.ID); got.State != StateFailed || ev == nil || ev.Type != EventFailed {
		t.Fatalf("task %s event %+v; want FAILED with task.failed, not a retry", got.State, ev)
	}
}

func TestT7_FailedIdempotentTaskIsRetriedAfterBackoff(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	a := leaseOne(t, f, true, 3)
	before := db.Now()
	_, ev, err := f.store.AttemptComplete(context.Background(), &AttemptCompleteParams{
		Grant:   f.grant(a.Task.QueueID),
		Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: OutcomeFailed, ErrorCode: "E", ErrorMessage: "boom",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := taskState(t, f, a.Task.ID)
	if got.State != StatePending || ev == nil || ev.Type != EventRequeued || !got.AvailableAt.After(before) {
		t.Fatalf("task %s available_at %v event %+v; want PENDING later than %v with task.requeued", got.State, got.AvailableAt, ev, before)
	}
}

func TestT5_CompleteIsIdempotentByProof(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	a := leaseOne(t, f, false, 1)
	ctx := context.Background()
	p := &AttemptCompleteParams{
		Grant:   f.grant(a.Task.QueueID),
		Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: OutcomeSucceeded, Result: []byte(`{"n":12345678901234567890}`),
	}
	first, ev, err := f.store.AttemptComplete(ctx, p)
	if err != nil || first.Deduplicated || ev == nil {
		t.Fatalf("first: %+v %v %v", first, ev, err)
	}
	again, ev2, err := f.store.AttemptComplete(ctx, p)
	if err != nil || !again.Deduplicated || ev2 != nil || again.Revision != first.Revision || again.State != StateSucceeded {
		t.Fatalf("repeat: %+v event %v err %v; want the original with deduplicated", again, ev2, err)
	}
	wrong := *p
	// Another first character: a random secret starts with "x" one time
	// in 64, and replacing it with "x" would send the right secret.
	lead := "x"
	if p.LeaseSecret[0] == 'x' {
		lead = "y"
	}
	wrong.LeaseSecret = lead + p.LeaseSecret[1:]
	if _, _, err := f.store.AttemptComplete(ctx, &wrong); err == nil || err.Error() != "tasks: complete: "+errLeaseLost.Error() {
		t.Fatalf("wrong secret: %v, want the lease-lost error", err)
	}
	stale := *p
	stale.Epoch++
	if _, _, err := f.store.AttemptComplete(ctx, &stale); err == nil {
		t.Fatal("a wrong epoch must be refused")
	}
	if got := taskState(t, f, a.Task.ID); got.Revision != uint64(first.Revision) {
		t.Fatalf("refused proofs changed the task: revision %d", got.Revision)
	}
}

func TestT6_LeaseExpiryPaths(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		idempotent  bool
		maxAttempts int
		wantState   string
		wantEvent   string
		wantUncert  bool
	}{
		{"IdempotentWithAttemptsLeftIsRequeued", true, 2, StatePending, EventRequeued, false},
		{"IdempotentExhaustedFails", true, 1, StateFailed, EventFailed, true},
		{"NotIdempotentNeedsReview", false, 3, StateNeedsReview, EventNeedsReview, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 1)
			a := leaseOne(t, f, tc.idempotent, tc.maxAttempts)
			if _, err := f.db.Exec(`UPDATE task_attempts SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), a.AttemptID); err != nil {
				t.Fatal(err)
			}
			events, err := f.store.attemptRecover(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			got := taskState(t, f, a.Task.ID)
			if got.State != tc.wantState || got.EffectUncertain != tc.wantUncert || len(events) != 1 || events[0].Type != tc.wantEvent {
				t.Fatalf("task %s uncertain=%v events=%+v; want %s uncertain=%v %s", got.State, got.EffectUncertain, events, tc.wantState, tc.wantUncert, tc.wantEvent)
			}
			if string(events[0].Details) != `{"state":"`+tc.wantState+`","reason":"LEASE_EXPIRED"}` {
				t.Fatalf("details %s", events[0].Details)
			}
			// The expired proof can no longer complete.
			_, _, err = f.store.AttemptComplete(context.Background(), &AttemptCompleteParams{
				Grant:   f.grant(a.Task.QueueID),
				Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
				Outcome: OutcomeSucceeded,
			})
			if err == nil {
				t.Fatal("a completion after expiry must get TASK_LEASE_LOST")
			}
		})
	}
}

// TestT4_LeaseUnsentIsReleasedWithoutCountingTheAttempt: a lease whose
// task.assign was never written goes back as if the worker had released
// it: PENDING after the delay, the attempt not counted, no effect
// uncertain, task.requeued with ASSIGN_NOT_SENT; a repeat changes nothing.
func TestT4_LeaseUnsentIsReleasedWithoutCountingTheAttempt(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	a := leaseOne(t, f, false, 1)
	before := db.Now()
	ev, err := f.store.AttemptUnsent(ctx, &a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ev == nil || ev.Type != EventRequeued || !strings.Contains(string(ev.Details), `"reason":"`+reasonAssignNotSent+`"`) {
		t.Fatalf("event %+v, want task.requeued with %s", ev, reasonAssignNotSent)
	}
	got := taskState(t, f, a.Task.ID)
	if got.State != StatePending || got.Attempts != 0 || got.EffectUncertain {
		t.Fatalf("task %s attempts=%d uncertain=%v; want PENDING, 0, false", got.State, got.Attempts, got.EffectUncertain)
	}
	if !got.AvailableAt.After(before.Add(59 * time.Second)) {
		t.Errorf("available_at %v, want a minute after %v", got.AvailableAt, before)
	}
	var state string
	if err := f.db.QueryRow(`SELECT state FROM task_attempts WHERE id = ?`, a.AttemptID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != AttemptReleased {
		t.Errorf("attempt %s, want %s", state, AttemptReleased)
	}
	if ev, err := f.store.AttemptUnsent(ctx, &a, time.Minute); err != nil || ev != nil {
		t.Errorf("second AttemptUnsent = %v, %v; want nothing, nil", ev, err)
	}
	if n := eventCount(t, f, a.Task.ID); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

func TestT4_LeaseTellsWhenTheSessionIsFull(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	queue := f.queues[0]
	f.submit(t, queue, 3, true, 3)
	open := func(capacity int) string {
		t.Helper()
		session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: queue, CredentialID: f.worker, Capacity: capacity})
		if err != nil {
			t.Fatal(err)
		}
		return session
	}
	lease := func(session string, wantLeased int, wantFull bool) []Assignment {
		t.Helper()
		got, full, err := f.store.AttemptLease(ctx, session, f.grant(queue), time.Minute)
		if err != nil || len(got) != wantLeased || full != wantFull {
			t.Fatalf("lease: %v, %d assignments, full %v; want %d, full %v", err, len(got), full, wantLeased, wantFull)
		}
		return got
	}
	two := open(2)
	lease(two, 2, true)
	// A full session leases nothing, although a task waits.
	lease(two, 0, true)
	// A session the queue cannot fill is not full.
	lease(open(3), 1, false)
	// An empty queue leaves a session with room not full.
	lease(open(1), 0, false)
}

// TestT4_LeasesRacingOnOneSessionStayWithinItsCapacity: leases of one
// session that wait for each other's lock on its row count the attempts the
// one before committed, so together they never lease beyond the capacity.
func TestT4_LeasesRacingOnOneSessionStayWithinItsCapacity(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	queue := f.queues[0]
	f.submit(t, queue, 20, true, 3)
	const capacity = 3
	session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: queue, CredentialID: f.worker, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		assigned int
	)
	for range 8 {
		wg.Go(func() {
			got, _, err := f.store.AttemptLease(ctx, session, f.grant(queue), time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			assigned += len(got)
			mu.Unlock()
		})
	}
	wg.Wait()
	var running int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM task_attempts WHERE session_id = ? AND state = 'RUNNING'`, session).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if assigned != capacity || running != capacity {
		t.Fatalf("%d assigned, %d attempts running; want %d (the capacity)", assigned, running, capacity)
	}
}
