package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/wake"
)

// The post-commit sequencer (T-9).
//
// An appending transaction does not take a sequence: it writes its event to
// result_intake with the task change and commits without touching the
// queue's head row, so appends to one queue no longer wait for each
// other's COMMIT. After the commit, a sequencing pass moves the committed
// intake rows into result_events in one transaction of its own: it locks
// them, locks each queue's head row, numbers the queue's rows head+1 …
// in intake order, deletes them from the intake and commits. The pass holds
// each head row until its COMMIT, so passes, like appends before, become
// visible in commit order and without gaps; but one pass (one COMMIT)
// sequences every event committed before it, however many.
//
// Whoever commits an append waits for a pass that began after its commit
// (db.OnCommit, in appendEvent): when a write returns, its event has its
// sequence, as with an append under the head lock. Waiters on one pool
// share passes: one of them runs the pass, the others wait for it and
// arrive together at the next (group commit). Intake rows left by a node
// that died between its commit and the pass are sequenced by the next pass
// of any node (Module's sweep runs one every sweep interval).
const (
	// sequenceBatch bounds the intake rows one pass moves.
	sequenceBatch = 1000
	// sequenceTimeout bounds a pass run after a commit.
	sequenceTimeout = 10 * time.Second
)

// Appended is what one sequencing pass appended to one queue's log: its
// events in sequence order, the first right after the head From.
type Appended struct {
	QueueID string
	From    uint64
	Events  []EventRef
}

// SequencedHook runs inside a sequencing pass's transaction, after the pass
// has appended its events and while it holds the head rows of their queues,
// so that what the hook writes commits with the events, in the same COMMIT.
// appended is in queue order. An error fails the pass, whose events the
// next pass sequences.
type SequencedHook func(ctx context.Context, tx *sql.Tx, appended []Appended) error

// sequencers holds the sequencer of each pool. It is keyed by pool, like
// db's observers, so that the package's transactional functions
// (TaskCancel, TaskReview) sequence what they append in any caller's
// transaction, and stores on one pool share passes.
var sequencers sync.Map // *sql.DB -> *sequencer

// sequencerOf returns pool's sequencer, made on first use.
func sequencerOf(pool *sql.DB) *sequencer {
	if s, ok := sequencers.Load(pool); ok {
		return s.(*sequencer)
	}
	s, _ := sequencers.LoadOrStore(pool, &sequencer{db: pool})
	return s.(*sequencer)
}

// sequencer runs the sequencing passes of one pool, one round at a time.
type sequencer struct {
	db *sql.DB
	// appended is notified after every round that sequenced an event.
	appended wake.Broadcast

	mu sync.Mutex
	// requested counts the syncs asked for; done is the highest of them
	// whose commits are sequenced.
	requested, done uint64
	// running is the round under way, nil between rounds.
	running *round
	// from is the lowest intake id the next round must read from: the
	// lowest among the rows of the syncs waiting for it.
	from uint64
	// hooks run in every pass (OnSequenced). A round takes the slice as
	// it is, so it is replaced, never changed in place.
	hooks []*SequencedHook

	// waited, when set, is told how long each committed write waited for
	// the sequences of its events (observeWaits).
	waited atomic.Pointer[func(time.Duration)]
}

// observeWaits makes every later write on this pool that appended events
// report to fn how long, after its COMMIT, it waited for their sequences:
// for a pass, with the deliveries its hooks make, to commit them. fn must
// be fast and must not block. A pool has at most one such function, the
// last one set; stop removes it unless another replaced it.
func (q *sequencer) observeWaits(fn func(time.Duration)) (stop func()) {
	p := &fn
	q.waited.Store(p)
	return func() { q.waited.CompareAndSwap(p, nil) }
}

// onSequenced adds a hook that every later pass of this pool runs, until
// remove is called.
func (q *sequencer) onSequenced(h SequencedHook) (remove func()) {
	entry := &h
	q.mu.Lock()
	defer q.mu.Unlock()
	q.hooks = append(slices.Clone(q.hooks), entry)
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.hooks = slices.DeleteFunc(slices.Clone(q.hooks), func(e *SequencedHook) bool { return e == entry })
	}
}

// round is one run of passes for the syncs waiting when it began.
type round struct {
	ended chan struct{}
	// Set before ended is closed: the sequences given, by event id, and
	// the round's error.
	sequenced map[string]uint64
	err       error
}

// sync returns once every intake row with an id from from on, committed
// before the call, is sequenced, with the sequences of the events named by
// ids; it returns an error when ctx ends first. A caller that finds no
// round running runs one for itself and for everyone who arrives
// meanwhile.
//
// A pass reads the intake in id order from the lowest id its callers
// staged, not from the start: the start of the index holds the rows
// earlier passes deleted until InnoDB purges them, and walking those cost
// every pass more than the rest of its work. Rows below that (staged by a
// node that died, or by a commit whose own sync failed) are found by the
// sweep, which syncs from 0.
func (q *sequencer) sync(ctx context.Context, from uint64, ids ...string) (map[string]uint64, error) {
	for {
		out, err := q.syncOnce(ctx, from, ids)
		if err != nil || len(out) == len(ids) {
			return out, err
		}
		// An event of ids was held by another node's pass: it is in the
		// log once that pass commits, and the next round takes it if the
		// pass rolls back. Returning before either would answer a write
		// whose event has no sequence yet.
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("tasks: %d of %d events not sequenced: %w", len(ids)-len(out), len(ids), ctx.Err())
		case <-time.After(syncRetryPause):
		}
	}
}

// syncRetryPause is how long a sync waits before it looks again for events
// another node's pass held.
const syncRetryPause = 2 * time.Millisecond

// syncOnce is one round of sync.
func (q *sequencer) syncOnce(ctx context.Context, from uint64, ids []string) (map[string]uint64, error) {
	q.mu.Lock()
	if q.requested == q.done && q.running == nil {
		q.from = from // nobody is waiting: forget the last round's floor
	}
	q.requested++
	q.from = min(q.from, from)
	ticket := q.requested
	var covered *round
	for covered == nil {
		if r := q.running; r != nil {
			q.mu.Unlock()
			select {
			case <-r.ended:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			q.mu.Lock()
			if r.err == nil && q.done >= ticket {
				covered = r
			}
			continue
		}
		// Every sync up to target committed before this round's first
		// pass reads the intake.
		r := &round{ended: make(chan struct{})}
		target, floor := q.requested, q.from
		q.from = math.MaxUint64
		q.running = r
		q.mu.Unlock()
		r.sequenced, r.err = q.runRound(ctx, floor)
		if len(r.sequenced) > 0 {
			q.appended.Notify()
		}
		q.mu.Lock()
		q.running = nil
		close(r.ended)
		if r.err != nil {
			// Those waiting on this round run the next one from its floor.
			q.from = min(q.from, floor)
			q.mu.Unlock()
			return nil, r.err
		}
		q.done = max(q.done, target)
		covered = r
	}
	q.mu.Unlock()
	out := make(map[string]uint64, len(ids))
	var missing []string
	for _, id := range ids {
		if seq, ok := covered.sequenced[id]; ok {
			out[id] = seq
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		// Sequenced by another node's pass.
		if err := sequencesOf(ctx, q.db, missing, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// round runs passes from intake id from on until one finds fewer rows than
// a full batch, so that every such row committed before it began is
// sequenced, by it or by a pass of another node whose locks it waited for.
func (q *sequencer) runRound(ctx context.Context, from uint64) (map[string]uint64, error) {
	sequenced := map[string]uint64{}
	for {
		q.mu.Lock()
		hooks := q.hooks
		q.mu.Unlock()
		n, err := sequencePass(ctx, q.db, from, hooks, sequenced)
		if err != nil {
			return sequenced, err
		}
		if n < sequenceBatch {
			return sequenced, nil
		}
	}
}

// intakeRow is what a pass reads of an intake row.
type intakeRow struct {
	id        uint64
	queueID   string
	eventID   string
	eventType string
}

// sequencePass moves up to sequenceBatch committed intake rows with ids
// from from on into the result log, numbering each queue's rows in intake
// order, in one transaction that also runs hooks. It records the sequences
// it gave in out and returns how many rows it moved.
func sequencePass(ctx context.Context, pool *sql.DB, from uint64, hooks []*SequencedHook, out map[string]uint64) (int, error) {
	var moved []intakeRow
	var given map[string]uint64
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		moved, given = nil, map[string]uint64{}
		// SKIP LOCKED passes over rows whose transaction has not committed
		// (an insert holds its row's lock until COMMIT; waiting for it
		// would make every pass wait for the slowest append under way) and
		// rows another node's pass holds: both are left to their own
		// syncs.
		rows, err := tx.QueryContext(ctx, `SELECT id, queue_id, event_id, type FROM result_intake WHERE id >= ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`, from, sequenceBatch)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r intakeRow
			if err := rows.Scan(&r.id, &r.queueID, &r.eventID, &r.eventType); err != nil {
				rows.Close()
				return err
			}
			moved = append(moved, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(moved) == 0 {
			return nil
		}
		// Heads are locked in queue order, so passes of two nodes never
		// wait on each other in a cycle; within a queue, intake order.
		byQueue := map[string][]intakeRow{}
		for _, r := range moved {
			byQueue[r.queueID] = append(byQueue[r.queueID], r)
		}
		queues := make([]string, 0, len(byQueue))
		for q := range byQueue {
			queues = append(queues, q)
		}
		slices.Sort(queues)
		now := db.Now()
		appended := make([]Appended, len(queues))
		for i, queueID := range queues {
			if appended[i], err = sequenceQueue(ctx, tx, queueID, byQueue[queueID], now, given); err != nil {
				return err
			}
		}
		for _, h := range hooks {
			if err := (*h)(ctx, tx, appended); err != nil {
				return err
			}
		}
		args := make([]any, len(moved))
		for i, r := range moved {
			args[i] = r.id
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM result_intake WHERE id IN (`+db.Placeholders(len(args))+`)`, args...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("tasks: sequence the result log: %w", err)
	}
	for id, seq := range given {
		out[id] = seq
	}
	return len(moved), nil
}

// sequenceQueue appends one queue's intake rows (in intake order) to its
// log inside a pass, recording the sequence of each event in given, and
// returns what it appended.
func sequenceQueue(ctx context.Context, tx *sql.Tx, queueID string, rows []intakeRow, now time.Time, given map[string]uint64) (Appended, error) {
	n := len(rows)
	// LAST_INSERT_ID(expr) hands the new head back in the statement's own
	// reply; the head row stays locked until the pass commits.
	res, err := tx.ExecContext(ctx, `
		INSERT INTO queue_streams (queue_id, head_sequence, updated_at) VALUES (?, LAST_INSERT_ID(?), ?)
		ON DUPLICATE KEY UPDATE head_sequence = LAST_INSERT_ID(head_sequence + ?), updated_at = VALUES(updated_at)`,
		queueID, n, now, n)
	if err != nil {
		return Appended{}, fmt.Errorf("advance log head: %w", err)
	}
	head, err := res.LastInsertId()
	if err != nil || head < int64(n) {
		return Appended{}, fmt.Errorf("read log head: %d, %v", head, err)
	}
	seq := uint64(head) - uint64(n)
	out := Appended{QueueID: queueID, From: seq, Events: make([]EventRef, 0, n)}
	// The bodies are copied by the database itself, so they never travel
	// to this process; each row's sequence is named by its intake id, in
	// statements of a bounded CASE.
	for chunk := range slices.Chunk(rows, caseRowsPerStatement) {
		args := make([]any, 0, 3*len(chunk))
		for _, r := range chunk {
			seq++
			args = append(args, r.id, seq)
			given[r.eventID] = seq
			out.Events = append(out.Events, EventRef{Sequence: seq, ID: r.eventID, Type: r.eventType})
		}
		for _, r := range chunk {
			args = append(args, r.id)
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO result_events (queue_id, sequence, id, type, task_id, task_revision, occurred_at, details, snapshot)
			SELECT queue_id, `+db.CaseByID(len(chunk))+`, event_id, type, task_id, task_revision,
				occurred_at, details, snapshot
			FROM result_intake WHERE id IN (`+db.Placeholders(len(chunk))+`)`, args...); err != nil {
			return Appended{}, fmt.Errorf("append events: %w", err)
		}
	}
	return out, nil
}

// sequencesOf adds to out the sequences of the logged events among ids.
func sequencesOf(ctx context.Context, q Querier, ids []string, out map[string]uint64) error {
	args := db.Args(ids)
	rows, err := q.QueryContext(ctx, `SELECT id, sequence FROM result_events WHERE id IN (`+db.Placeholders(len(ids))+`)`, args...)
	if err != nil {
		return fmt.Errorf("tasks: read sequences: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var seq uint64
		if err := rows.Scan(&id, &seq); err != nil {
			return fmt.Errorf("tasks: read sequences: %w", err)
		}
		out[id] = seq
	}
	return rows.Err()
}

// intakeKey keys a transaction's staged events (db.TxValue).
type intakeKey struct{}

// stagedEvents are the events one transaction staged in the intake, and
// the lowest intake id among them.
type stagedEvents struct {
	events []*Event
	from   uint64
}

// sequenceAfterCommit makes the commit of tx, which staged ev in the
// intake, wait for the sequences of all the events it staged and set
// them: one sync for the whole transaction. A pass that fails leaves the
// events in the intake for the next pass (the sweep's, at the latest) and
// is logged; the write itself has committed and stands.
func sequenceAfterCommit(ctx context.Context, tx *sql.Tx, ev *Event, intakeID uint64) {
	staged := db.TxValue(tx, intakeKey{}, func() *stagedEvents {
		staged := &stagedEvents{from: intakeID}
		q := sequencerOf(db.Pool(tx))
		db.OnCommit(tx, func() {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sequenceTimeout)
			defer cancel()
			ids := make([]string, len(staged.events))
			for i, ev := range staged.events {
				ids[i] = ev.ID
			}
			seqs, err := q.sync(ctx, staged.from, ids...)
			if err != nil {
				slog.Warn("result log: sequencing after a commit failed; the next pass takes its events", "events", len(ids), "err", err)
				return
			}
			if observe := q.waited.Load(); observe != nil {
				(*observe)(time.Since(start))
			}
			for _, ev := range staged.events {
				ev.Sequence = httpx.Uint64(seqs[ev.ID])
			}
		})
		return staged
	})
	staged.events = append(staged.events, ev)
	staged.from = min(staged.from, intakeID)
}

// awaitSequenced returns once the events the given tasks committed so far
// are sequenced: a read of their state calls it after reading them, so
// that whoever sees a task's new state through the API finds the change's
// event in the log too, as when the append numbered it in the change's own
// transaction. It costs one indexed read when nothing waits, which is
// nearly always.
func (s *Store) awaitSequenced(ctx context.Context, taskIDs ...string) error {
	if len(taskIDs) == 0 {
		return nil
	}
	args := db.Args(taskIDs)
	var from sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT MIN(id) FROM result_intake WHERE task_id IN (`+db.Placeholders(len(args))+`)`, args...).Scan(&from)
	if err != nil {
		return fmt.Errorf("tasks: look for unsequenced events: %w", err)
	}
	if !from.Valid {
		return nil
	}
	_, err = s.seq.sync(ctx, uint64(from.Int64))
	return err
}
