package tasks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/internal/wake"
)

// Store reads and writes tasks, their attempts and the result log. Every
// state change and its log row are written in one transaction.
//
// The store announces its own facts: after a COMMIT of its own that makes
// a task PENDING or requests a cancel, it wakes the waiters of Submitted or
// CancelRequested on this node, and the sequencer wakes those of Appended
// after each pass that logged an event. Callers never notify; other nodes
// find the change by polling.
type Store struct {
	db     *sql.DB
	grants Identity
	// Backoff returns the delay before a failed idempotent task is offered
	// again, given the attempts used so far.
	Backoff func(attempts int) time.Duration

	// submitted wakes the worker connections of the queues tasks were
	// submitted to (Notify), or all of them when a task of any queue may
	// have become PENDING (NotifyAll); other nodes wake all theirs
	// (ClusterSignals).
	submitted       wake.Scoped
	cancelRequested wake.Broadcast
	// seq sequences the events the pool's transactions staged.
	seq *sequencer

	// metrics counts what the store's committed changes did; nil counts
	// nothing.
	metrics *taskMetrics
}

// Identity is what the store needs of the admin module: the grant checks
// of leases and completions, and the application lock of sessions bounded
// per application (N-4).
type Identity interface {
	auth.GrantChecker
	auth.ApplicationLocker
}

// NewStore returns a Store with exponential retry backoff between min and
// max. Leases and completions check their credential's grant with grants
// (the admin module's) inside their own transaction, and sessions bounded
// per application lock their application with it.
func NewStore(pool *sql.DB, grants Identity, backoffMin, backoffMax time.Duration) *Store {
	return &Store{db: pool, grants: grants, seq: sequencerOf(pool), Backoff: func(attempts int) time.Duration {
		d := backoffMin
		for i := 1; i < attempts && d < backoffMax; i++ {
			d *= 2
		}
		return min(d, backoffMax)
	}}
}

// pool returns the store's pool.
func (s *Store) pool() *sql.DB { return s.db }

// Appended returns a channel closed after the next sequencing pass on this
// node that logs an event. Take it before reading the log, then wait on it,
// so that no append is missed.
func (s *Store) Appended() <-chan struct{} { return s.seq.appended.C() }

// OnSequenced adds a hook that every later sequencing pass on the store's
// pool runs, whichever store's write it sequences (see SequencedHook),
// until remove is called: a module that stops must remove its hook, or
// passes of the servers that follow it on the pool would still run it.
func (s *Store) OnSequenced(h SequencedHook) (remove func()) { return s.seq.onSequenced(h) }

// ObserveSequencing makes every later write on the store's pool that
// appended events to a result log, whichever store made it, report to fn
// how long it waited after its COMMIT for their sequences (the sequencing pass that
// numbers them and makes their deliveries), until stop is called. A pool
// has one such function, the last one set; fn must be fast and must not
// block.
func (s *Store) ObserveSequencing(fn func(time.Duration)) (stop func()) {
	return s.seq.observeWaits(fn)
}

// Submitted returns a channel closed after the next commit on this node
// that may have made a task of any queue PENDING (requeued, released,
// reviewed), or when another node announced one. A worker connection waits
// on it and on SubmittedTo its queue.
func (s *Store) Submitted() <-chan struct{} { return s.submitted.C() }

// SubmittedTo returns a channel closed after the next submission to the
// queue committed on this node.
func (s *Store) SubmittedTo(queueID string) <-chan struct{} { return s.submitted.KeyC(queueID) }

// CancelRequested returns a channel closed after the next commit on this
// node that requests the cancel of a task.
func (s *Store) CancelRequested() <-chan struct{} { return s.cancelRequested.C() }

// announce wakes the waiters of what the events of a committed transaction
// changed: task.requeued makes its task PENDING (the sequencer has woken
// those of Appended). It is called after the COMMIT, never inside the
// transaction, and also counts the results among events.
func (s *Store) announce(events ...*Event) {
	s.metrics.appended(events...)
	requeued := false
	for _, ev := range events {
		requeued = requeued || (ev != nil && ev.Type == EventRequeued)
	}
	if requeued {
		s.submitted.NotifyAll()
	}
}

// Tx runs fn in a transaction on the store's pool, for writes made with the
// package's transactional functions (TaskInsert, TaskCancel, TaskReview)
// outside the module's handlers, and after its COMMIT announces all that
// they can change: submitted and cancel requested (what they appended is
// sequenced and announced by then, as with any transaction). A waiter woken
// for nothing looks once and waits again. Deadlocks are retried as by db.Tx.
func (s *Store) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := db.Tx(ctx, s.db, fn); err != nil {
		return err
	}
	s.submitted.NotifyAll()
	s.cancelRequested.Notify()
	return nil
}

const taskColumns = `id, namespace_id, queue_id, credential_id, state, revision, idempotent, max_attempts, attempts,
	effect_uncertain, cancel_requested, current_attempt_id, lease_epoch, input, result, error_code, error_message,
	available_at, created_at, updated_at, finished_at, trace_parent, trace_state`

type scanner = db.Scanner

func scanTask(row scanner) (*Task, error) {
	var (
		t                 Task
		attempt           sql.NullString
		result            []byte
		errCode, errMsg   sql.NullString
		finished          sql.NullTime
		traceParent       sql.NullString
		traceState        sql.NullString
		input             []byte
		idempotent, uncer bool
	)
	err := row.Scan(&t.ID, &t.NamespaceID, &t.QueueID, &t.CredentialID, &t.State, &t.Revision, &idempotent,
		&t.MaxAttempts, &t.Attempts, &uncer, &t.CancelRequested, &attempt, &t.LeaseEpoch, &input, &result,
		&errCode, &errMsg, &t.AvailableAt, &t.CreatedAt, &t.UpdatedAt, &finished, &traceParent, &traceState)
	if err != nil {
		return nil, err
	}
	t.Idempotent, t.EffectUncertain = idempotent, uncer
	t.CurrentAttemptID = attempt.String
	t.Input = input
	if result != nil {
		t.Result = result
	}
	t.ErrorCode, t.ErrorMessage = errCode.String, errMsg.String
	t.Trace = tracing.Context{Parent: traceParent.String, State: traceState.String}
	if finished.Valid {
		f := finished.Time
		t.FinishedAt = &f
	}
	return &t, nil
}

// TaskInsertParams describe a new task.
type TaskInsertParams struct {
	NamespaceID  string
	QueueID      string
	CredentialID string
	Input        []byte
	Idempotent   bool
	MaxAttempts  int
	// Trace is the W3C trace context to keep with the task; zero for none.
	Trace tracing.Context
}

// TaskInsert stores a new PENDING task in tx.
func TaskInsert(ctx context.Context, tx *sql.Tx, p *TaskInsertParams) (*Task, error) {
	t := newTask(p, db.Now())
	if err := tasksInsert(ctx, tx, []*Task{t}); err != nil {
		return nil, err
	}
	return t, nil
}

// newTask is the task p describes, as it is inserted at now.
func newTask(p *TaskInsertParams, now time.Time) *Task {
	return &Task{
		ID: db.NewID(), NamespaceID: p.NamespaceID, QueueID: p.QueueID, CredentialID: p.CredentialID,
		State: StatePending, Revision: 1, Idempotent: p.Idempotent, MaxAttempts: p.MaxAttempts,
		Input: p.Input, AvailableAt: now, CreatedAt: now, UpdatedAt: now, Trace: p.Trace,
	}
}

// insertRowsPerStatement bounds the tasks one INSERT of tasksInsert writes.
// (A batch's request body, at most httpx's limit, bounds its bytes.)
const insertRowsPerStatement = 100

// tasksInsert inserts new tasks (from newTask) with multi-row INSERTs.
func tasksInsert(ctx context.Context, tx *sql.Tx, tasks []*Task) error {
	for chunk := range slices.Chunk(tasks, insertRowsPerStatement) {
		n := len(chunk)
		args := make([]any, 0, 13*n)
		for _, t := range chunk {
			args = append(args, t.ID, t.NamespaceID, t.QueueID, t.CredentialID, t.State, t.Idempotent, t.MaxAttempts,
				string(t.Input), t.AvailableAt, t.CreatedAt, t.UpdatedAt, nullString(t.Trace.Parent), nullString(t.Trace.State))
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO tasks (id, namespace_id, queue_id, credential_id, state, revision, idempotent, max_attempts,
				input, available_at, created_at, updated_at, trace_parent, trace_state)
			VALUES `+strings.Repeat("(?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?), ", n-1)+`(?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
		if err != nil {
			return fmt.Errorf("tasks: insert: %w", err)
		}
	}
	return nil
}

// nullString is s, or NULL when s is empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TaskGet returns a task by id, or sql.ErrNoRows.
func TaskGet(ctx context.Context, q Querier, id string) (*Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tasks: get: %w", err)
	}
	return t, err
}

// taskLock reads a task FOR UPDATE inside tx.
func taskLock(ctx context.Context, tx *sql.Tx, id string) (*Task, error) {
	t, err := scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ? FOR UPDATE`, id))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tasks: lock: %w", err)
	}
	return t, err
}

// taskListParams filter and page a queue's tasks, newest first.
type taskListParams struct {
	QueueID string
	State   string
	httpx.ListPage
}

// taskList returns up to p.Limit+1 tasks so the caller can tell whether
// another page exists.
func taskList(ctx context.Context, q Querier, p *taskListParams) ([]*Task, error) {
	out, err := httpx.ListRows(ctx, q, scanTask, `SELECT `+taskColumns+` FROM tasks WHERE queue_id = ?`, []any{p.QueueID}, "", p.State, p.ListPage)
	if err != nil {
		return nil, fmt.Errorf("tasks: list: %w", err)
	}
	return out, nil
}

// ErrStateConflict is returned when a task's state does not allow an action.
func errStateConflict(format string, args ...any) error {
	return httpx.Errorf(httpx.CodeStateConflict, format, args...)
}

// TaskCancel cancels a task in tx (T-2): a PENDING task becomes CANCELLED at
// once with a task.cancelled event; a RUNNING task gets cancel_requested and
// ends as its worker reports; a final task is a STATE_CONFLICT. It returns
// the task after the change and the event appended, if any.
func TaskCancel(ctx context.Context, tx *sql.Tx, id, reason string) (*Task, *Event, error) {
	t, err := taskLock(ctx, tx, id)
	if err != nil {
		return nil, nil, err
	}
	switch t.State {
	case StatePending:
		ev, err := transition(ctx, tx, t, StateCancelled, EventCancelled, eventDetails{Reason: reasonCancelRequested})
		return t, ev, err
	case StateRunning:
		if !t.CancelRequested {
			t.CancelRequested = true
			t.UpdatedAt = db.Now()
			if err := taskSave(ctx, tx, t); err != nil {
				return nil, nil, err
			}
		}
		return t, nil, nil
	}
	return nil, nil, errStateConflict("task is %s and can no longer be cancelled", t.State)
}

// Review resolutions.
const (
	resolutionRequeue   = "requeue"
	ResolutionSucceeded = "succeeded"
	resolutionFailed    = "failed"
)

// TaskReviewParams describe a review of a NEEDS_REVIEW task.
type TaskReviewParams struct {
	ID               string
	ExpectedRevision uint64
	Resolution       string
	Reason           string
	Result           []byte
}

// TaskReview resolves a NEEDS_REVIEW task in tx: requeue sends it back to
// PENDING (with one more attempt when the budget is used up, and the
// uncertainty cleared, since a person has looked at it); succeeded and
// failed settle it, appending another authoritative result.
func TaskReview(ctx context.Context, tx *sql.Tx, p *TaskReviewParams) (*Task, *Event, error) {
	t, err := taskLock(ctx, tx, p.ID)
	if err != nil {
		return nil, nil, err
	}
	if t.State != StateNeedsReview {
		return nil, nil, errStateConflict("task is %s; only NEEDS_REVIEW tasks can be reviewed", t.State)
	}
	if t.Revision != p.ExpectedRevision {
		return nil, nil, errStateConflict("expected_revision %d does not match the task's revision %d", p.ExpectedRevision, t.Revision)
	}
	var ev *Event
	switch p.Resolution {
	case resolutionRequeue:
		if t.Attempts >= t.MaxAttempts {
			t.MaxAttempts = t.Attempts + 1
		}
		t.EffectUncertain = false
		t.CancelRequested = false
		t.Result, t.ErrorCode, t.ErrorMessage = nil, "", ""
		t.AvailableAt = db.Now()
		ev, err = transition(ctx, tx, t, StatePending, EventRequeued, eventDetails{Reason: reasonReviewRequeue})
	case ResolutionSucceeded:
		t.Result, t.ErrorCode, t.ErrorMessage = p.Result, "", ""
		ev, err = transition(ctx, tx, t, StateSucceeded, EventSucceeded, eventDetails{Reason: reasonReviewResolved})
	case resolutionFailed:
		t.ErrorCode, t.ErrorMessage = "REVIEW_FAILED", p.Reason
		if p.Result != nil {
			t.Result = p.Result
		}
		ev, err = transition(ctx, tx, t, StateFailed, EventFailed, eventDetails{Reason: reasonReviewResolved, ErrorCode: "REVIEW_FAILED"})
	default:
		return nil, nil, httpx.Errorf(httpx.CodeInvalidArgument, "resolution must be requeue, succeeded or failed")
	}
	if err != nil {
		return nil, nil, err
	}
	return t, ev, nil
}
