package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/orbitrun/orbit/internal/auth"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fixture is a database with one namespace and the given number of queues.
type fixture struct {
	db     *sql.DB
	store  *Store
	scope  admin.Scope
	queues []string
	// worker is a real credential with tasks:work on every queue, whose
	// grant leases and completions check.
	worker string
}

// grant is the worker credential's grant on queue.
func (f *fixture) grant(queue string) auth.Grant {
	return auth.Grant{CredentialID: f.worker, Permission: auth.PermTasksWork, QueueID: queue, What: "queue"}
}

func setup(t *testing.T, queues int) *fixture {
	t.Helper()
	return fixtureOn(t, testdb.New(t), queues)
}

// fixtureOn is setup on a pool of the test's own.
func fixtureOn(t *testing.T, pool *sql.DB, queues int) *fixture {
	t.Helper()
	f := &fixture{db: pool, store: NewStore(pool, admin.NewStore(pool), time.Millisecond, 10*time.Millisecond)}
	for i := 0; i < queues; i++ {
		sc, err := admin.NewStore(pool).ScopeEnsure(context.Background(), &admin.ScopeEnsureParams{
			Namespace: "ns", Application: "app", Environment: "env", Queue: fmt.Sprintf("q%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		f.scope = sc
		f.queues = append(f.queues, sc.QueueID)
	}
	cred, _, err := admin.NewStore(pool).CredentialCreate(context.Background(), &admin.CredentialCreateParams{
		NamespaceID: f.scope.NamespaceID, ApplicationID: f.scope.ApplicationID, EnvironmentID: f.scope.EnvironmentID,
		Label: "worker", Permissions: []string{auth.PermTasksWork}, Queues: f.queues,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.worker = cred.ID
	return f
}

// submit inserts n PENDING tasks on queue.
func (f *fixture) submit(t *testing.T, queue string, n int, idempotent bool, maxAttempts int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		err := db.Tx(context.Background(), f.db, func(tx *sql.Tx) error {
			task, err := TaskInsert(context.Background(), tx, &TaskInsertParams{
				NamespaceID: f.scope.NamespaceID, QueueID: queue, CredentialID: "c", Input: []byte(`{"n":1}`),
				Idempotent: idempotent, MaxAttempts: maxAttempts,
			})
			if err == nil {
				ids = append(ids, task.ID)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// cancelTogether submits n PENDING tasks on queue and cancels them all in
// one transaction: one write that appends n results.
func (f *fixture) cancelTogether(t *testing.T, queue string, n int) {
	t.Helper()
	ids := f.submit(t, queue, n, false, 1)
	ctx := context.Background()
	if err := db.Tx(ctx, f.db, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, _, err := TaskCancel(ctx, tx, id, ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// readLog follows a queue's log the way a subscriber does, asking for events
// after the last sequence it saw, until it has seen want events or stop is
// closed. It fails the test on any gap or reordering.
func readLog(t *testing.T, pool *sql.DB, queue string, want int, done <-chan struct{}) {
	t.Helper()
	var last uint64
	seen := 0
	for seen < want {
		events, err := EventListAfter(context.Background(), pool, queue, last, 50)
		if err != nil {
			t.Error(err)
			return
		}
		for _, ev := range events {
			if uint64(ev.Sequence) != last+1 {
				t.Errorf("queue %s: after sequence %d the reader saw %d: a gap or a sequence that committed out of order", queue, last, ev.Sequence)
				return
			}
			last = uint64(ev.Sequence)
			seen++
		}
		if len(events) == 0 {
			select {
			case <-done:
				// Writers finished: one more read must complete the log.
				if events, err := EventListAfter(context.Background(), pool, queue, last, want); err == nil && len(events) == 0 && seen < want {
					t.Errorf("queue %s: writers done but only %d of %d events visible", queue, seen, want)
					return
				}
			default:
			}
		}
	}
}

// completeAll runs workers sessions that lease and complete every task of
// queue, each completion in its own transaction.
func completeAll(t *testing.T, f *fixture, queue string, workers, total int) {
	t.Helper()
	var completed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: queue, CredentialID: f.worker, Capacity: 1})
			if err != nil {
				t.Error(err)
				return
			}
			for completed.Load() < int64(total) {
				assigned, _, err := f.store.AttemptLease(ctx, session, f.grant(queue), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				for _, a := range assigned {
					_, _, err := f.store.AttemptComplete(ctx, &AttemptCompleteParams{
						Grant:   f.grant(a.Task.QueueID),
						Proof:   Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
						Outcome: OutcomeSucceeded, Result: []byte(`{"ok":true}`),
					})
					if err != nil {
						t.Error(err)
						return
					}
					completed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}

func TestT9_SequencesVisibleInCommitOrderWithoutGaps(t *testing.T) {
	t.Parallel()
	const total = 400
	f := setup(t, 1)
	queue := f.queues[0]
	f.submit(t, queue, total, false, 1)
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		readLog(t, f.db, queue, total, done)
	}()
	completeAll(t, f, queue, 16, total)
	close(done)
	readers.Wait()
	s, err := StreamGet(context.Background(), f.db, queue)
	if err != nil {
		t.Fatal(err)
	}
	if s.Head != total {
		t.Fatalf("head = %d, want %d", s.Head, total)
	}
}

func TestT9_SequencesPerQueueAcrossQueues(t *testing.T) {
	t.Parallel()
	const perQueue = 120
	f := setup(t, 4)
	done := make(chan struct{})
	var readers, writers sync.WaitGroup
	for _, q := range f.queues {
		f.submit(t, q, perQueue, false, 1)
		readers.Add(1)
		go func() {
			defer readers.Done()
			readLog(t, f.db, q, perQueue, done)
		}()
	}
	for _, q := range f.queues {
		writers.Add(1)
		go func() {
			defer writers.Done()
			completeAll(t, f, q, 4, perQueue)
		}()
	}
	writers.Wait()
	close(done)
	readers.Wait()
	for _, q := range f.queues {
		s, err := StreamGet(context.Background(), f.db, q)
		if err != nil {
			t.Fatal(err)
		}
		if s.Head != perQueue {
			t.Errorf("queue %s head = %d, want %d", q, s.Head, perQueue)
		}
	}
}

func TestT9_RolledBackAppendLeavesNoGap(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	q := f.queues[0]
	ids := f.submit(t, q, 2, false, 1)
	ctx := context.Background()
	// Cancel the first task in a transaction that rolls back.
	err := db.Tx(ctx, f.db, func(tx *sql.Tx) error {
		if _, _, err := TaskCancel(ctx, tx, ids[0], ""); err != nil {
			return err
		}
		return fmt.Errorf("roll back")
	})
	if err == nil {
		t.Fatal("want the rollback error")
	}
	if err := db.Tx(ctx, f.db, func(tx *sql.Tx) error {
		_, _, err := TaskCancel(ctx, tx, ids[1], "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	events, err := EventListAfter(ctx, f.db, q, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Sequence != 1 || events[0].AggregateID != ids[1] {
		t.Fatalf("events = %+v, want exactly sequence 1 for the second task", events)
	}
}

func TestT11_RetentionPurgesFromTheBottomAndRecordsTheMark(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	q := f.queues[0]
	ctx := context.Background()
	for _, id := range f.submit(t, q, 5, false, 1) {
		if err := db.Tx(ctx, f.db, func(tx *sql.Tx) error { _, _, err := TaskCancel(ctx, tx, id, ""); return err }); err != nil {
			t.Fatal(err)
		}
	}
	// Age the first three events past the cutoff.
	if _, err := f.db.Exec(`UPDATE result_events SET occurred_at = occurred_at - INTERVAL 8 DAY WHERE queue_id = ? AND sequence <= 3`, q); err != nil {
		t.Fatal(err)
	}
	// Sequence 2 is held, as if a subscription still had a live delivery;
	// a second hold that keeps nothing does not change that.
	cutoff := db.Now().Add(-7 * 24 * time.Hour)
	n, err := EventPurge(ctx, f.db, &EventPurgeParams{QueueID: q, Cutoff: cutoff, Batch: 100, Holds: []RetentionHold{holdFrom(0), holdFrom(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("purged %d events, want 1 (stop at the protected sequence 2)", n)
	}
	s, _ := StreamGet(ctx, f.db, q)
	if s.RetentionMark != 2 {
		t.Fatalf("retention mark = %d, want 2", s.RetentionMark)
	}
	n, err = EventPurge(ctx, f.db, &EventPurgeParams{QueueID: q, Cutoff: cutoff, Batch: 100})
	if err != nil || n != 2 {
		t.Fatalf("second purge: n=%d err=%v, want 2 events", n, err)
	}
	s, _ = StreamGet(ctx, f.db, q)
	if s.RetentionMark != 4 || s.Head != 5 {
		t.Fatalf("stream = %+v, want mark 4 head 5", s)
	}
	events, _ := EventListAfter(ctx, f.db, q, 0, 10)
	if len(events) != 2 || events[0].Sequence != 4 {
		t.Fatalf("remaining events %+v, want 4 and 5", events)
	}
}

// holdFrom is a RetentionHold that keeps every sequence from seq on; 0
// keeps nothing.
type holdFrom uint64

func (h holdFrom) RetentionHeld(_ context.Context, _ Querier, _ string, from, to uint64) (uint64, error) {
	if h == 0 || uint64(h) >= to {
		return to, nil
	}
	return max(uint64(h), from), nil
}
