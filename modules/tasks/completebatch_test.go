package tasks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// leaseN submits n idempotent tasks of three attempts on queue and leases
// all of them to one new session.
func leaseN(t *testing.T, f *fixture, queue string, n int) []Assignment {
	t.Helper()
	ctx := context.Background()
	f.submit(t, queue, n, true, 3)
	session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: queue, CredentialID: f.worker, Capacity: n})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := f.store.AttemptLease(ctx, session, f.grant(queue), time.Minute)
	if err != nil || len(got) != n {
		t.Fatalf("lease: %v, %d assignments; want %d", err, len(got), n)
	}
	return got
}

// succeeded is the completion a's worker sends for a success.
func succeeded(f *fixture, a Assignment) *AttemptCompleteParams {
	return &AttemptCompleteParams{
		Grant:   f.grant(a.Task.QueueID),
		Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: OutcomeSucceeded, Result: []byte(`{"ok":true}`),
	}
}

// eventCount returns how many result events the log holds for a task.
func eventCount(t *testing.T, f *fixture, taskID string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM result_events WHERE task_id = ?`, taskID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCompleteBatch_SameProofTwiceAppendsOneEvent(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	a := leaseOne(t, f, false, 1)
	p := succeeded(f, a)
	again := *p
	out, err := f.store.AttemptCompleteBatch(context.Background(), []*AttemptCompleteParams{p, &again})
	if err != nil {
		t.Fatal(err)
	}
	first, second := out[0], out[1]
	if first.Err != nil || first.Reply.Deduplicated || first.Event == nil || first.Event.Type != EventSucceeded {
		t.Fatalf("first: %+v; want applied with a task.succeeded event", first)
	}
	want := first.Reply
	want.Deduplicated = true
	if second.Err != nil || second.Event != nil || second.Reply != want {
		t.Fatalf("second: %+v; want reply %+v and no event", second, want)
	}
	if n := eventCount(t, f, a.Task.ID); n != 1 {
		t.Fatalf("%d result events for the task, want 1", n)
	}
}

func TestCompleteBatch_RefusedProofDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	as := leaseN(t, f, f.queues[0], 3)
	// The third lease runs out and the task is leased again, so its first
	// proof is stale.
	if _, err := f.db.Exec(`UPDATE task_attempts SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), as[2].AttemptID); err != nil {
		t.Fatal(err)
	}
	if events, err := f.store.attemptRecover(ctx, 10); err != nil || len(events) != 1 {
		t.Fatalf("expire: %d events, %v; want the third task requeued", len(events), err)
	}
	session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: f.queues[0], CredentialID: f.worker, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if again, _, err := f.store.AttemptLease(ctx, session, f.grant(f.queues[0]), time.Minute); err != nil || len(again) != 1 || again[0].Task.ID != as[2].Task.ID {
		t.Fatalf("re-lease: %+v %v; want the requeued task", again, err)
	}
	valid := succeeded(f, as[0])
	wrongSecret := succeeded(f, as[1])
	wrongSecret.LeaseSecret = strings.Repeat("A", len(wrongSecret.LeaseSecret))
	stale := succeeded(f, as[2])
	out, err := f.store.AttemptCompleteBatch(ctx, []*AttemptCompleteParams{wrongSecret, valid, stale})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != errLeaseLost || out[1].Err != nil || out[2].Err != errLeaseLost {
		t.Fatalf("errors %v, %v, %v; want lease lost, nil, lease lost", out[0].Err, out[1].Err, out[2].Err)
	}
	if got := taskState(t, f, valid.TaskID); got.State != StateSucceeded {
		t.Errorf("valid completion: task %s, want SUCCEEDED", got.State)
	}
	if got := taskState(t, f, wrongSecret.TaskID); got.State != StateRunning || got.CurrentAttemptID != wrongSecret.AttemptID {
		t.Errorf("wrong secret changed the task: %s attempt %s", got.State, got.CurrentAttemptID)
	}
	if got := taskState(t, f, stale.TaskID); got.State != StateRunning || got.CurrentAttemptID == stale.AttemptID {
		t.Errorf("stale proof changed the task: %s attempt %s", got.State, got.CurrentAttemptID)
	}
}

func TestCompleteBatch_InvalidOutcomeFailsOnlyItsOwnItem(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	as := leaseN(t, f, f.queues[0], 3)
	invalid := succeeded(f, as[1])
	invalid.Outcome = "done"
	out, err := f.store.AttemptCompleteBatch(context.Background(), []*AttemptCompleteParams{succeeded(f, as[0]), invalid, succeeded(f, as[2])})
	if err != nil {
		t.Fatal(err)
	}
	var herr *httpx.Error
	if !errors.As(out[1].Err, &herr) || herr.Code != httpx.CodeInvalidArgument {
		t.Fatalf("invalid outcome: %v, want INVALID_ARGUMENT", out[1].Err)
	}
	for _, i := range []int{0, 2} {
		if out[i].Err != nil || out[i].Event == nil {
			t.Errorf("completion %d: %+v; want applied", i, out[i])
		}
		if got := taskState(t, f, as[i].Task.ID); got.State != StateSucceeded {
			t.Errorf("completion %d: task %s, want SUCCEEDED", i, got.State)
		}
	}
	if got := taskState(t, f, invalid.TaskID); got.State != StateRunning || eventCount(t, f, invalid.TaskID) != 0 {
		t.Errorf("invalid outcome changed the task: %s", got.State)
	}
}

func TestCompleteBatch_SequencesArePerQueueWithoutGaps(t *testing.T) {
	t.Parallel()
	f := setup(t, 2)
	ctx := context.Background()
	// The second queue's log already holds one event, so its batch
	// sequences continue from 2.
	requestCancel(t, f, f.submit(t, f.queues[1], 1, true, 3)[0])
	q0 := leaseN(t, f, f.queues[0], 2)
	q1 := leaseN(t, f, f.queues[1], 3)
	interleaved := []Assignment{q1[0], q0[0], q1[1], q0[1], q1[2]}
	batch := make([]*AttemptCompleteParams, 0, len(interleaved))
	for _, a := range interleaved {
		batch = append(batch, succeeded(f, a))
	}
	out, err := f.store.AttemptCompleteBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		queue string
		head  uint64
	}{{f.queues[0], 2}, {f.queues[1], 4}} {
		events, err := EventListAfter(ctx, f.db, tc.queue, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(events)) != tc.head {
			t.Fatalf("queue %s: %d events, want %d", tc.queue, len(events), tc.head)
		}
		for i, ev := range events {
			if uint64(ev.Sequence) != uint64(i+1) {
				t.Fatalf("queue %s: event %d has sequence %d, want %d", tc.queue, i, ev.Sequence, i+1)
			}
		}
		if s, err := StreamGet(ctx, f.db, tc.queue); err != nil || s.Head != tc.head {
			t.Fatalf("queue %s: stream %+v %v, want head %d", tc.queue, s, err, tc.head)
		}
	}
	// Each outcome's event is the one the log holds for its task.
	for i, o := range out {
		if o.Err != nil || o.Event == nil {
			t.Fatalf("completion %d: %+v; want applied", i, o)
		}
		logged, err := eventsBySequence(ctx, f.db, interleaved[i].Task.QueueID, []uint64{uint64(o.Event.Sequence)})
		if err != nil {
			t.Fatal(err)
		}
		if ev := logged[uint64(o.Event.Sequence)]; ev.ID != o.Event.ID || ev.AggregateID != batch[i].TaskID {
			t.Errorf("completion %d: event %+v, log holds %+v at that sequence", i, o.Event, ev)
		}
	}
}
