package tasks

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
)

// TestT9_TwoNodesSequenceWithoutGaps: two nodes (two pools, each with its
// own store and sequencer) complete the tasks of one queue at once; their
// passes contend for the intake and the head row, and a reader following
// the log still sees 1, 2, 3 … without a gap or a late lower sequence, with
// every task's result logged once.
func TestT9_TwoNodesSequenceWithoutGaps(t *testing.T) {
	t.Parallel()
	const total = 300
	ctx := context.Background()
	dsn := testdb.NewDSN(t)
	pools := make([]*sql.DB, 2)
	for i := range pools {
		pool, err := db.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		pools[i] = pool
	}
	f := fixtureOn(t, pools[0], 1)
	queue := f.queues[0]
	f.submit(t, queue, total, false, 1)
	second := &fixture{db: pools[1], store: NewStore(pools[1], admin.NewStore(pools[1]), time.Millisecond, 10*time.Millisecond),
		scope: f.scope, queues: f.queues, worker: f.worker}
	done := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() { readLog(t, f.db, queue, total, done) })
	var completed atomic.Int64
	var workers sync.WaitGroup
	for i := range 12 {
		node := []*fixture{f, second}[i%2]
		workers.Go(func() {
			session, err := node.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: queue, CredentialID: node.worker, Capacity: 1})
			if err != nil {
				t.Error(err)
				return
			}
			for completed.Load() < total && !t.Failed() {
				assigned, _, err := node.store.AttemptLease(ctx, session, node.grant(queue), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				for _, a := range assigned {
					if _, _, err := node.store.AttemptComplete(ctx, succeeded(node, a)); err != nil {
						t.Error(err)
						return
					}
					completed.Add(1)
				}
			}
		})
	}
	workers.Wait()
	close(done)
	reader.Wait()
	var events, distinct, staged int
	err := f.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT task_id), (SELECT COUNT(*) FROM result_intake)
		FROM result_events WHERE queue_id = ?`, queue).Scan(&events, &distinct, &staged)
	if err != nil {
		t.Fatal(err)
	}
	if events != total || distinct != total || staged != 0 {
		t.Fatalf("log holds %d events for %d tasks, intake %d rows; want %d, %d, 0", events, distinct, staged, total, total)
	}
}

// TestT9_IntakeLeftBehindIsSequencedByTheNextPass: events a node committed
// to the intake but never sequenced (it died between the two) are
// sequenced by the next pass of any node, after what the log holds and in
// intake order.
func TestT9_IntakeLeftBehindIsSequencedByTheNextPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, 1)
	queue := f.queues[0]
	ids := f.submit(t, queue, 3, false, 1)
	requestCancel(t, f, ids[0]) // sequence 1, through a normal commit
	for i, id := range ids[1:] {
		// What a commit leaves when its node dies before the pass.
		_, err := f.db.ExecContext(ctx, `INSERT INTO result_intake (queue_id, event_id, type, task_id, task_revision, occurred_at, details, snapshot)
			VALUES (?, ?, 'task.cancelled', ?, 2, ?, '{}', '{}')`, queue, "left"+string(rune('a'+i)), id, db.Now())
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.seq.sync(ctx, 0); err != nil {
		t.Fatal(err)
	}
	events, err := EventListAfter(ctx, f.db, queue, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[1].ID != "lefta" || events[1].Sequence != 2 || events[2].ID != "leftb" || events[2].Sequence != 3 {
		t.Fatalf("log %+v, want the left-behind events at 2 and 3", events)
	}
	if s, err := StreamGet(ctx, f.db, queue); err != nil || s.Head != 3 {
		t.Fatalf("stream %+v %v, want head 3", s, err)
	}
}

// TestT9_FailedPassKeepsTheWriteAndTheNextPassLogsIt: when the pass after
// a commit fails, the write stands (it has committed), its event waits in
// the intake, and the next pass logs it with the next sequence.
func TestT9_FailedPassKeepsTheWriteAndTheNextPassLogsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, 1)
	queue := f.queues[0]
	ids := f.submit(t, queue, 1, false, 1)
	if _, err := f.db.ExecContext(ctx, `RENAME TABLE result_events TO result_events_away`); err != nil {
		t.Fatal(err)
	}
	var ev *Event
	err := f.store.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		_, ev, err = TaskCancel(ctx, tx, ids[0], "")
		return err
	})
	if err != nil {
		t.Fatalf("cancel whose sequencing failed: %v; want the committed write to stand", err)
	}
	if ev == nil || ev.Sequence != 0 {
		t.Fatalf("event %+v, want one without a sequence yet", ev)
	}
	if n := count(t, f.db, `SELECT COUNT(*) FROM tasks WHERE id = ? AND state = 'CANCELLED'`, ids[0]); n != 1 {
		t.Fatal("the cancel did not commit")
	}
	if _, err := f.db.ExecContext(ctx, `RENAME TABLE result_events_away TO result_events`); err != nil {
		t.Fatal(err)
	}
	seqs, err := f.store.seq.sync(ctx, 0, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	if seqs[ev.ID] != 1 {
		t.Fatalf("sequences %v, want %s at 1", seqs, ev.ID)
	}
	if n := count(t, f.db, `SELECT COUNT(*) FROM result_intake`); n != 0 {
		t.Fatalf("%d rows left in the intake", n)
	}
}

// count runs a COUNT query.
func count(t *testing.T, pool *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestT8_ReadingATaskWaitsForItsEventsSequence: whoever reads a task's
// state (GET /v1/tasks/{id}, the list, the history) finds the event of
// that state's change in the log: the read sequences the task's events
// still in the intake before it answers.
func TestT8_ReadingATaskWaitsForItsEventsSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, 1)
	queue := f.queues[0]
	ids := f.submit(t, queue, 2, false, 1)
	// A change committed whose pass has not run yet.
	if _, err := f.db.ExecContext(ctx, `INSERT INTO result_intake (queue_id, event_id, type, task_id, task_revision, occurred_at, details, snapshot)
		VALUES (?, 'pending', 'task.cancelled', ?, 2, ?, '{}', '{}')`, queue, ids[0], db.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.store.awaitSequenced(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if n := count(t, f.db, `SELECT COUNT(*) FROM result_intake`); n != 1 {
		t.Fatalf("reading another task sequenced its neighbour's event: %d intake rows left, want 1", n)
	}
	if err := f.store.awaitSequenced(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	events, err := EventListAfter(ctx, f.db, queue, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].ID != "pending" || events[0].Sequence != 1 {
		t.Fatalf("log %+v, want the task's event at 1", events)
	}
}

// TestT9_PassesRunTheHooksUntilRemoved: a pass runs every hook added to its
// pool's sequencer, in its transaction, with what it appended per queue;
// a removed hook is not run again.
func TestT9_PassesRunTheHooksUntilRemoved(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	queue := f.queues[0]
	var kept, removed []Appended
	f.store.OnSequenced(func(_ context.Context, _ *sql.Tx, a []Appended) error { kept = append(kept, a...); return nil })
	remove := f.store.OnSequenced(func(_ context.Context, _ *sql.Tx, a []Appended) error { removed = append(removed, a...); return nil })
	f.cancelTogether(t, queue, 2)
	remove()
	f.cancelTogether(t, queue, 1)
	if len(removed) != 1 || removed[0].QueueID != queue || removed[0].From != 0 || len(removed[0].Events) != 2 {
		t.Fatalf("removed hook saw %+v; want the first pass only: 2 events after 0", removed)
	}
	if len(kept) != 2 || kept[1].From != 2 || len(kept[1].Events) != 1 || kept[1].Events[0].Sequence != 3 || kept[1].Events[0].Type != EventCancelled {
		t.Fatalf("kept hook saw %+v; want both passes, the second appending sequence 3 after 2", kept)
	}
}

// TestT9_WritesReportTheirWaitForSequencing: a committed write that
// appended results reports, once, how long it waited for their sequences,
// to the last function set on its pool; a function replaced by another is
// not removed by its own stop, and after the last stop nothing reports.
func TestT9_WritesReportTheirWaitForSequencing(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	queue := f.queues[0]
	var first, second []time.Duration
	stopFirst := f.store.ObserveSequencing(func(d time.Duration) { first = append(first, d) })
	f.cancelTogether(t, queue, 3)
	stopSecond := f.store.ObserveSequencing(func(d time.Duration) { second = append(second, d) })
	stopFirst()
	f.cancelTogether(t, queue, 1)
	stopSecond()
	f.cancelTogether(t, queue, 1)
	if len(first) != 1 || first[0] <= 0 {
		t.Fatalf("first observer saw %v; want one positive wait, for the write of 3 results", first)
	}
	if len(second) != 1 || second[0] <= 0 {
		t.Fatalf("second observer saw %v; want one positive wait: the first's stop must not remove it, its own must", second)
	}
}
