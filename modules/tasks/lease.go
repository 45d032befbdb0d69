package tasks

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
)

// Attempt states.
const (
	AttemptRunning   = "RUNNING"
	attemptCompleted = "COMPLETED"
	AttemptReleased  = "RELEASED"
	AttemptExpired   = "EXPIRED"
)

// Outcomes a worker may report.
const (
	OutcomeSucceeded   = "succeeded"
	OutcomeFailed      = "failed"
	OutcomeNeedsReview = "needs_review"
	OutcomeCancelled   = "cancelled"
)

// errLeaseLost is returned for a completion or release whose proof does not
// hold the task's current lease.
var errLeaseLost = httpx.Errorf(httpx.CodeTaskLeaseLost, "the lease is no longer held by this proof")

// ErrSessionClosed is AttemptLease's answer for a session that is closed
// while its connection still runs: the node serving it was taken for dead
// by another node, which closed its sessions (N-3). The connection must
// close so that its worker reconnects and resumes its leases.
var ErrSessionClosed = httpx.Errorf(httpx.CodeUnavailable, "this connection's session was closed because its node was taken for dead; reconnect")

// Assignment is one task leased to a worker session.
type Assignment struct {
	Task        *Task
	AttemptID   string
	Epoch       uint64
	LeaseUntil  time.Time
	LeaseSecret string
}

// WorkerSessionOpenParams describe a worker connection.
type WorkerSessionOpenParams struct {
	QueueID      string
	CredentialID string
	// ApplicationID is the application of the credential; the session
	// counts against its connections (N-4).
	ApplicationID string
	WorkerName    string
	Capacity      int
	// MaxPerApplication bounds the worker connections of the application
	// open at once across every node (workers.max_connections_per_app);
	// zero admits without counting, for callers that bound nothing.
	MaxPerApplication int
	// NodeID is the node serving the connection (modules.Env.NodeID).
	NodeID string
}

// ErrApplicationConnections is returned by WorkerSessionOpen when the
// application already has MaxPerApplication worker connections open.
var ErrApplicationConnections = errors.New("tasks: the application is at its limit of worker connections")

// WorkerSessionOpen records a new worker session and returns its id. With
// p.MaxPerApplication set, it first locks the application (the store's
// Identity) and counts its open worker sessions in the same
// transaction, so that no two nodes admit the same last slot (N-4); at the
// limit it records nothing and returns ErrApplicationConnections. A session
// whose COMMIT outcome is unknown is closed again before the error is
// returned, so that it never holds a slot nobody uses.
func (s *Store) WorkerSessionOpen(ctx context.Context, p *WorkerSessionOpenParams) (string, error) {
	id := db.NewID()
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		if p.MaxPerApplication > 0 {
			if err := s.grants.ApplicationLock(ctx, tx, p.ApplicationID); err != nil {
				return err
			}
			var open int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM worker_sessions WHERE application_id = ? AND closed_at IS NULL`,
				p.ApplicationID).Scan(&open); err != nil {
				return err
			}
			if open >= p.MaxPerApplication {
				return ErrApplicationConnections
			}
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO worker_sessions (id, queue_id, credential_id, application_id, worker_name, capacity, connected_at, node_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, id, p.QueueID, p.CredentialID, p.ApplicationID, p.WorkerName, p.Capacity, db.Now(), p.NodeID)
		return err
	})
	if errors.Is(err, db.ErrCommitUnknown) {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unknownCommitCloseTimeout)
		_ = s.WorkerSessionClose(closeCtx, id)
		cancel()
	}
	if err != nil {
		return "", fmt.Errorf("tasks: open session: %w", err)
	}
	return id, nil
}

// unknownCommitCloseTimeout bounds the close of a session whose COMMIT
// outcome was unknown.
const unknownCommitCloseTimeout = 5 * time.Second

// WorkerSessionClose marks a session closed. Its leases stay until they expire or
// are completed: a completion proof is not bound to the session.
func (s *Store) WorkerSessionClose(ctx context.Context, sessionID string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE worker_sessions SET closed_at = ? WHERE id = ? AND closed_at IS NULL`, db.Now(), sessionID)
	if err != nil {
		return fmt.Errorf("tasks: close session: %w", err)
	}
	return nil
}

// sessionLock locks a worker session's row in tx and returns its queue, its
// capacity and the leases it holds; open is false for a closed session.
// Capacity checks count against this locked row, so they hold across nodes.
// The count is read in the same round trip, without locking the attempts,
// once the session's lock is granted: it sees every lease committed by the
// transaction that held the lock before.
func sessionLock(ctx context.Context, tx *sql.Tx, sessionID string) (queueID string, capacity, held int, open bool, err error) {
	var closed sql.NullTime
	err = tx.QueryRowContext(ctx, `SELECT w.queue_id, w.capacity, w.closed_at,
		(SELECT COUNT(*) FROM task_attempts a WHERE a.session_id = w.id AND a.state = 'RUNNING')
		FROM worker_sessions w WHERE w.id = ? FOR UPDATE`, sessionID).
		Scan(&queueID, &capacity, &closed, &held)
	if err != nil || closed.Valid {
		return "", 0, 0, false, err
	}
	return queueID, capacity, held, true, nil
}

// AttemptLease assigns up to the session's free capacity of PENDING tasks of its
// queue (T-4). Capacity is checked against the session row, locked in the
// same transaction, so it holds across nodes; SKIP LOCKED lets many sessions
// lease from one queue without ever assigning a task twice. The leases are
// committed before AttemptLease returns, so callers send task.assign only for
// persisted leases. grant is what the session's credential must still hold,
// checked in the same transaction: when it no longer holds, nothing is
// leased and the error is that of auth.GrantChecker.CheckGrants. A closed
// session leases nothing and gets ErrSessionClosed. full reports that the
// session holds as many leases as its capacity once these are counted: it
// cannot lease more until one of them ends, so its dispatcher need not try
// on every submission.
func (s *Store) AttemptLease(ctx context.Context, sessionID string, grant auth.Grant, leaseDuration time.Duration) (assigned []Assignment, full bool, err error) {
	var out []Assignment
	err = db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		out, full = nil, false
		queueID, capacity, held, open, err := sessionLock(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if !open {
			return ErrSessionClosed
		}
		denied, err := s.grants.CheckGrants(ctx, tx, []auth.Grant{grant})
		if err != nil {
			return err
		}
		if denied[0] != nil {
			return denied[0]
		}
		free := capacity - held
		if free <= 0 {
			full = true
			return nil
		}
		now := db.Now()
		rows, err := tx.QueryContext(ctx, `SELECT `+taskColumns+` FROM tasks
			WHERE queue_id = ? AND state = 'PENDING' AND available_at <= ?
			ORDER BY available_at, created_at LIMIT ? FOR UPDATE SKIP LOCKED`, queueID, now, free)
		if err != nil {
			return err
		}
		var picked []*Task
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				rows.Close()
				return err
			}
			picked = append(picked, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(picked) == 0 {
			return nil
		}
		full = len(picked) == free
		// The leases are written together: one UPDATE of the tasks, one
		// INSERT of their attempts.
		var c changes
		values := make([]string, len(picked))
		args := make([]any, 0, 8*len(picked))
		for i, t := range picked {
			secret, digest := auth.NewLeaseSecret()
			a := Assignment{Task: t, AttemptID: db.NewID(), LeaseUntil: now.Add(leaseDuration), LeaseSecret: secret}
			t.Attempts++
			t.LeaseEpoch++
			t.CurrentAttemptID = a.AttemptID
			t.CancelRequested = false
			a.Epoch = t.LeaseEpoch
			if _, err := c.transition(t, StateRunning, "", eventDetails{}); err != nil {
				return err
			}
			values[i] = "(?, ?, ?, ?, ?, ?, ?, 'RUNNING', ?)"
			args = append(args, a.AttemptID, t.ID, t.QueueID, sessionID, a.Epoch, digest[:], a.LeaseUntil, now)
			out = append(out, a)
		}
		if err := c.write(ctx, tx); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO task_attempts (id, task_id, queue_id, session_id, epoch, lease_secret_digest, lease_until, state, started_at)
			VALUES `+strings.Join(values, ", "), args...)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("tasks: lease: %w", err)
	}
	return out, full, nil
}

// Proof identifies a lease: the attempt, its epoch and the secret sent in
// task.assign.
type Proof struct {
	TaskID      string
	AttemptID   string
	Epoch       uint64
	LeaseSecret string
	// QueueID, when set, is the only queue the proof may act on: a worker
	// session answers only for leases of the queue it serves.
	QueueID string
}

type attemptRow struct {
	taskID  string
	queueID string
	epoch   uint64
	digest  []byte
	state   string
	reply   sql.NullString
}

// attemptLock locks the attempt named by p and checks the proof in constant
// time. Any mismatch is ErrLeaseLost, indistinguishable from a lost lease.
func attemptLock(ctx context.Context, tx *sql.Tx, p *Proof) (*attemptRow, error) {
	var a attemptRow
	err := tx.QueryRowContext(ctx, `SELECT task_id, queue_id, epoch, lease_secret_digest, state, reply FROM task_attempts WHERE id = ? FOR UPDATE`, p.AttemptID).
		Scan(&a.taskID, &a.queueID, &a.epoch, &a.digest, &a.state, &a.reply)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errLeaseLost
	}
	if err != nil {
		return nil, err
	}
	return a.check(p)
}

// check returns a when p proves its lease, checked in constant time, and
// ErrLeaseLost for a missing attempt (a nil a) or any mismatch,
// indistinguishable from a lost lease.
func (a *attemptRow) check(p *Proof) (*attemptRow, error) {
	if a == nil {
		return nil, errLeaseLost
	}
	digest := sha256.Sum256([]byte(p.LeaseSecret))
	ok := subtle.ConstantTimeCompare(a.digest, digest[:]) == 1
	if !ok || a.taskID != p.TaskID || a.epoch != p.Epoch || (p.QueueID != "" && a.queueID != p.QueueID) {
		return nil, errLeaseLost
	}
	return a, nil
}

// AttemptCompleteParams are a worker's report of an attempt's outcome.
type AttemptCompleteParams struct {
	Proof
	// Grant is what the completing credential must still hold (see AttemptLease).
	Grant        auth.Grant
	Outcome      string
	Result       []byte
	ErrorCode    string
	ErrorMessage string
}

// CompleteReply is what task.complete answers; a repeat of the same
// completion gets the original with Deduplicated set.
type CompleteReply struct {
	TaskID       string       `json:"task_id"`
	AttemptID    string       `json:"attempt_id"`
	Outcome      string       `json:"outcome"`
	State        string       `json:"state"`
	Revision     httpx.Uint64 `json:"revision"`
	Deduplicated bool         `json:"deduplicated"`
}

// AttemptComplete applies one worker's outcome; see AttemptCompleteBatch.
func (s *Store) AttemptComplete(ctx context.Context, p *AttemptCompleteParams) (CompleteReply, *Event, error) {
	outcomes, err := s.AttemptCompleteBatch(ctx, []*AttemptCompleteParams{p})
	if err == nil {
		err = outcomes[0].Err
	}
	if err != nil {
		return CompleteReply{}, nil, fmt.Errorf("tasks: complete: %w", err)
	}
	return outcomes[0].Reply, outcomes[0].Event, nil
}

// CompleteOutcome answers one completion of a batch: the reply and the
// event it appended (nil when deduplicated), or its own error.
type CompleteOutcome struct {
	Reply CompleteReply
	Event *Event
	Err   error
	// Trace is the task's trace context when the completion was applied
	// (not on a repeat), for the completion's span.
	Trace tracing.Context
}

// AttemptCompleteBatch applies workers' outcomes (T-5, T-7) in one transaction, so
// that completions arriving together share one commit. Each completion is
// judged on its own: idempotent by the proof (a repeat, in this batch or
// later, gets the original reply with Deduplicated); a proof that is not
// the task's current lease gets ErrLeaseLost in its outcome and changes
// nothing; one whose grant no longer holds gets the error of
// auth.GrantChecker.CheckGrants. A lease whose time ran out may still
// complete until the sweeper has expired it. An error means nothing was
// applied.
//
// The batch costs the same statements whatever its size: one locks every
// attempt it names, one every task, and one each saves the tasks, appends
// the events and closes the attempts. Attempts are locked before tasks,
// each in primary-key order, so concurrent batches never wait on each other
// in a cycle.
func (s *Store) AttemptCompleteBatch(ctx context.Context, completions []*AttemptCompleteParams) ([]CompleteOutcome, error) {
	order := make([]int, len(completions))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return strings.Compare(completions[a].TaskID, completions[b].TaskID)
	})
	grants := make([]auth.Grant, len(completions))
	for i, p := range completions {
		grants[i] = p.Grant
	}
	var outcomes []CompleteOutcome
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		outcomes = make([]CompleteOutcome, len(completions))
		denied, err := s.grants.CheckGrants(ctx, tx, grants)
		if err != nil {
			return err
		}
		var candidates []int
		var attemptIDs []string
		for _, i := range order {
			switch p := completions[i]; {
			case denied[i] != nil:
				outcomes[i].Err = denied[i]
			case !ValidOutcome(p.Outcome):
				outcomes[i].Err = errInvalidOutcome
			default:
				candidates = append(candidates, i)
				attemptIDs = append(attemptIDs, p.AttemptID)
			}
		}
		attempts, err := attemptsLock(ctx, tx, attemptIDs)
		if err != nil {
			return err
		}
		// first is the completion that answers for an attempt; a repeat
		// of its proof within the batch is answered like a repeat after
		// it.
		first := map[string]int{}
		var repeats, pending []int
		var taskIDs []string
		for _, i := range candidates {
			p := completions[i]
			if _, ok := first[p.AttemptID]; ok {
				repeats = append(repeats, i)
				continue
			}
			a, err := attempts[p.AttemptID].check(&p.Proof)
			switch {
			case err != nil:
				outcomes[i].Err = err
				continue
			case a.state == attemptCompleted && a.reply.Valid:
				if err := json.Unmarshal([]byte(a.reply.String), &outcomes[i].Reply); err != nil {
					return fmt.Errorf("tasks: stored reply: %w", err)
				}
				outcomes[i].Reply.Deduplicated = true
				continue
			case a.state != AttemptRunning:
				outcomes[i].Err = errLeaseLost
				continue
			}
			first[p.AttemptID] = i
			pending = append(pending, i)
			taskIDs = append(taskIDs, p.TaskID)
		}
		tasks, err := tasksLock(ctx, tx, taskIDs)
		if err != nil {
			return err
		}
		var c changes
		var closed []attemptClose
		now := db.Now()
		for _, i := range pending {
			p := completions[i]
			t := tasks[p.TaskID]
			if t == nil || t.State != StateRunning || t.CurrentAttemptID != p.AttemptID {
				outcomes[i].Err = errLeaseLost
				continue
			}
			ev, err := s.applyOutcome(&c, t, p)
			if err != nil {
				return err
			}
			reply := CompleteReply{TaskID: t.ID, AttemptID: p.AttemptID, Outcome: p.Outcome, State: t.State, Revision: httpx.Uint64(t.Revision)}
			stored, err := json.Marshal(reply)
			if err != nil {
				return err
			}
			closed = append(closed, attemptClose{id: p.AttemptID, outcome: p.Outcome, reply: string(stored)})
			outcomes[i] = CompleteOutcome{Reply: reply, Event: ev, Trace: t.Trace}
		}
		if err := c.write(ctx, tx); err != nil {
			return err
		}
		if err := attemptsClose(ctx, tx, closed, now); err != nil {
			return err
		}
		for _, i := range repeats {
			answer := outcomes[first[completions[i].AttemptID]]
			if answer.Err != nil {
				outcomes[i].Err = answer.Err
				continue
			}
			outcomes[i] = CompleteOutcome{Reply: answer.Reply}
			outcomes[i].Reply.Deduplicated = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	events := make([]*Event, len(outcomes))
	for i, o := range outcomes {
		events[i] = o.Event
	}
	s.announce(events...)
	return outcomes, nil
}

// attemptsLock locks the attempts with the given ids (in primary-key
// order) and returns them by id; absent ones are missing.
func attemptsLock(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*attemptRow, error) {
	out := make(map[string]*attemptRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := db.Args(ids)
	rows, err := tx.QueryContext(ctx, `SELECT id, task_id, queue_id, epoch, lease_secret_digest, state, reply FROM task_attempts
		WHERE id IN (`+db.Placeholders(len(ids))+`) ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a attemptRow
		if err := rows.Scan(&id, &a.taskID, &a.queueID, &a.epoch, &a.digest, &a.state, &a.reply); err != nil {
			return nil, err
		}
		out[id] = &a
	}
	return out, rows.Err()
}

// tasksLock locks the tasks with the given ids (in primary-key order) and
// returns them by id; absent ones are missing.
func tasksLock(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*Task, error) {
	out := make(map[string]*Task, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := db.Args(ids)
	rows, err := tx.QueryContext(ctx, `SELECT `+taskColumns+` FROM tasks
		WHERE id IN (`+db.Placeholders(len(ids))+`) ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks: lock: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("tasks: lock: %w", err)
		}
		out[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks: lock: %w", err)
	}
	return out, nil
}

// attemptClose is a completed attempt's outcome and stored reply.
type attemptClose struct {
	id, outcome, reply string
}

// attemptsClose marks attempts COMPLETED with their outcomes and replies,
// in one statement for up to caseRowsPerStatement attempts (CASE on the
// id, as in tasksSave).
func attemptsClose(ctx context.Context, tx *sql.Tx, closed []attemptClose, now time.Time) error {
	for chunk := range slices.Chunk(closed, caseRowsPerStatement) {
		byID := db.CaseByID(len(chunk))
		args := make([]any, 0, 5*len(chunk)+1)
		for _, a := range chunk {
			args = append(args, a.id, a.outcome)
		}
		for _, a := range chunk {
			args = append(args, a.id, a.reply)
		}
		args = append(args, now)
		for _, a := range chunk {
			args = append(args, a.id)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE task_attempts SET state = 'COMPLETED', outcome = `+byID+`,
			reply = `+byID+`, ended_at = ? WHERE id IN (`+db.Placeholders(len(chunk))+`)`, args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) applyOutcome(c *changes, t *Task, p *AttemptCompleteParams) (*Event, error) {
	switch p.Outcome {
	case OutcomeSucceeded:
		t.Result, t.ErrorCode, t.ErrorMessage = p.Result, "", ""
		return c.transition(t, StateSucceeded, EventSucceeded, eventDetails{Reason: reasonCompleted})
	case OutcomeFailed:
		t.ErrorCode, t.ErrorMessage = p.ErrorCode, p.ErrorMessage
		if t.Idempotent && t.Attempts < t.MaxAttempts && !t.CancelRequested {
			t.AvailableAt = db.Now().Add(s.Backoff(t.Attempts))
			return c.transition(t, StatePending, EventRequeued, eventDetails{Reason: reasonAttemptFailed, ErrorCode: p.ErrorCode})
		}
		t.Result = p.Result
		return c.transition(t, StateFailed, EventFailed, eventDetails{Reason: reasonAttemptFailed, ErrorCode: p.ErrorCode})
	case OutcomeNeedsReview:
		t.Result = p.Result
		return c.transition(t, StateNeedsReview, EventNeedsReview, eventDetails{Reason: reasonWorkerReview})
	case OutcomeCancelled:
		reason := ReasonWorkerCancelled
		if t.CancelRequested {
			reason = reasonCancelRequested
		}
		return c.transition(t, StateCancelled, EventCancelled, eventDetails{Reason: reason})
	}
	return nil, errInvalidOutcome
}

var errInvalidOutcome = httpx.Errorf(httpx.CodeInvalidArgument, "outcome must be succeeded, failed, needs_review or cancelled")

// ValidOutcome reports whether o is one of the four outcomes a worker may
// report.
func ValidOutcome(o string) bool {
	switch o {
	case OutcomeSucceeded, OutcomeFailed, OutcomeNeedsReview, OutcomeCancelled:
		return true
	}
	return false
}

// AttemptRelease returns a task whose effect never started to PENDING (the attempt
// does not count against the budget). Releasing twice is harmless.
func (s *Store) AttemptRelease(ctx context.Context, p *Proof, reason string) (*Event, error) {
	event, err := s.release(ctx, p, reason, reasonReleased, 0)
	if err != nil {
		return nil, fmt.Errorf("tasks: release: %w", err)
	}
	return event, nil
}

// AttemptUnsent gives back a lease whose task.assign was never written to
// the worker's connection, because the frame could not be encoded or the
// connection was closing. The worker never saw the task, so the attempt
// is released as by task.release: it does not count against the budget,
// no effect is uncertain, and the task goes back to PENDING
// (task.requeued, ASSIGN_NOT_SENT), or to CANCELLED when a cancel was
// requested. The task is offered again after delay, so that one whose
// frame can never be built is not leased in a loop. Calling it twice is
// harmless; a lease that has meanwhile ended otherwise gets ErrLeaseLost.
func (s *Store) AttemptUnsent(ctx context.Context, a *Assignment, delay time.Duration) (*Event, error) {
	p := Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret}
	event, err := s.release(ctx, &p, "task.assign not sent", reasonAssignNotSent, delay)
	if err != nil {
		return nil, fmt.Errorf("tasks: lease unsent: %w", err)
	}
	return event, nil
}

// release ends the running attempt of p as RELEASED with note, taking back
// its count of attempts, and moves its task to PENDING, available after
// delay, with reason in the event's details; a task with a cancel request
// ends CANCELLED instead.
func (s *Store) release(ctx context.Context, p *Proof, note, reason string, delay time.Duration) (*Event, error) {
	var event *Event
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		event = nil
		a, err := attemptLock(ctx, tx, p)
		if err != nil {
			return err
		}
		if a.state == AttemptReleased {
			return nil
		}
		if a.state != AttemptRunning {
			return errLeaseLost
		}
		t, err := taskLock(ctx, tx, p.TaskID)
		if err != nil {
			return err
		}
		if t.State != StateRunning || t.CurrentAttemptID != p.AttemptID {
			return errLeaseLost
		}
		t.Attempts--
		t.AvailableAt = db.Now().Add(delay)
		if t.CancelRequested {
			event, err = transition(ctx, tx, t, StateCancelled, EventCancelled, eventDetails{Reason: reasonCancelRequested})
		} else {
			event, err = transition(ctx, tx, t, StatePending, EventRequeued, eventDetails{Reason: reason})
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE task_attempts SET state = 'RELEASED', outcome = NULL, reply = ?, ended_at = ? WHERE id = ?`,
			note, db.Now(), p.AttemptID)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.announce(event)
	return event, nil
}

// renewQuery reads a session's running, unexpired leases for a
// renewal, without locking them. Left to itself the optimiser reads them
// through the expiry index (state, lease_until), a range over every
// running attempt of every session; the session index reads only the
// session's own attempts.
const renewQuery = `SELECT id, task_id FROM task_attempts FORCE INDEX (ix_attempts_session)
	WHERE session_id = ? AND state = 'RUNNING' AND lease_until >= ?`

// renewOneQuery extends one of those leases, by its primary key, if it is
// still running and unexpired.
const renewOneQuery = `UPDATE task_attempts FORCE INDEX (PRIMARY) SET lease_until = ?
	WHERE id = ? AND session_id = ? AND state = 'RUNNING' AND lease_until >= ?`

// AttemptRenew extends every running lease of a session to now + leaseDuration
// (worker.ping) and returns how many it renewed.
//
// It locks the leases in task order, the order in which completions
// (AttemptCompleteBatch) and releases lock attempts, so that a renewal and
// a completion wait for each other but never deadlock. A single UPDATE
// through the session index locked them in attempt-id order instead: each
// ping deadlocked with the completion batches holding that session's other
// attempts, and under a steady stream of completions a renewal could lose
// all five of db.Tx's attempts, which failed the ping and cost the worker
// its connection (UNAVAILABLE: leases could not be renewed). The list is
// read without locks; a lease that ends meanwhile is skipped by the
// UPDATE's own condition, and one leased after the read was leased with a
// full lease.
func (s *Store) AttemptRenew(ctx context.Context, sessionID string, leaseDuration time.Duration) (int, error) {
	var n int64
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		n = 0
		now := db.Now()
		rows, err := tx.QueryContext(ctx, renewQuery, sessionID, now)
		if err != nil {
			return err
		}
		type lease struct{ id, taskID string }
		var leases []lease
		for rows.Next() {
			var l lease
			if err := rows.Scan(&l.id, &l.taskID); err != nil {
				rows.Close()
				return err
			}
			leases = append(leases, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(leases, func(a, b lease) int { return strings.Compare(a.taskID, b.taskID) })
		until := now.Add(leaseDuration)
		for _, l := range leases {
			res, err := tx.ExecContext(ctx, renewOneQuery, until, l.id, sessionID, now)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("tasks: renew: %w", err)
	}
	return int(n), nil
}

// CancelRequestList returns the attempts of a session whose tasks have a
// pending cancel request, so the worker can be told (task.cancel).
func (s *Store) CancelRequestList(ctx context.Context, sessionID string) ([]Proof, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT a.task_id, a.id FROM task_attempts a JOIN tasks t ON t.id = a.task_id AND t.current_attempt_id = a.id
		WHERE a.session_id = ? AND a.state = 'RUNNING' AND t.cancel_requested = 1`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("tasks: cancel requests: %w", err)
	}
	defer rows.Close()
	var out []Proof
	for rows.Next() {
		var p Proof
		if err := rows.Scan(&p.TaskID, &p.AttemptID); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// attemptRecover recovers up to batch attempts whose lease ran out (T-6): an
// idempotent task with attempts left goes back to PENDING (task.requeued);
// an idempotent task without attempts ends FAILED and a non-idempotent one
// NEEDS_REVIEW, both with effect_uncertain. It returns the events appended.
func (s *Store) attemptRecover(ctx context.Context, batch int) ([]Event, error) {
	var events []Event
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		events = nil
		now := db.Now()
		rows, err := tx.QueryContext(ctx, `SELECT id, task_id FROM task_attempts
			WHERE state = 'RUNNING' AND lease_until < ? ORDER BY lease_until LIMIT ? FOR UPDATE SKIP LOCKED`, now, batch)
		if err != nil {
			return err
		}
		type expired struct{ attemptID, taskID string }
		var list []expired
		for rows.Next() {
			var e expired
			if err := rows.Scan(&e.attemptID, &e.taskID); err != nil {
				rows.Close()
				return err
			}
			list = append(list, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, e := range list {
			if _, err := tx.ExecContext(ctx, `UPDATE task_attempts SET state = 'EXPIRED', ended_at = ? WHERE id = ?`, now, e.attemptID); err != nil {
				return err
			}
			t, err := taskLock(ctx, tx, e.taskID)
			if err != nil {
				return err
			}
			if t.State != StateRunning || t.CurrentAttemptID != e.attemptID {
				continue
			}
			var ev *Event
			switch {
			case t.CancelRequested:
				// Nobody will run it again: the cancel wins, but the
				// attempt may have had effects.
				t.EffectUncertain = true
				ev, err = transition(ctx, tx, t, StateCancelled, EventCancelled, eventDetails{Reason: reasonCancelRequested})
			case t.Idempotent && t.Attempts < t.MaxAttempts:
				t.AvailableAt = now
				ev, err = transition(ctx, tx, t, StatePending, EventRequeued, eventDetails{Reason: ReasonLeaseExpired})
			case t.Idempotent:
				t.EffectUncertain = true
				t.ErrorCode, t.ErrorMessage = ReasonLeaseExpired, "the worker's lease expired and no attempts remain"
				ev, err = transition(ctx, tx, t, StateFailed, EventFailed, eventDetails{Reason: ReasonLeaseExpired})
			default:
				t.EffectUncertain = true
				ev, err = transition(ctx, tx, t, StateNeedsReview, EventNeedsReview, eventDetails{Reason: ReasonLeaseExpired})
			}
			if err != nil {
				return err
			}
			events = append(events, *ev)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: expire leases: %w", err)
	}
	s.metrics.leaseExpired(events)
	announced := make([]*Event, len(events))
	for i := range events {
		announced[i] = &events[i]
	}
	s.announce(announced...)
	return events, nil
}

// WorkerSessionAdopt moves to the session sessionID the leases a worker still
// holds from an earlier connection (worker.hello with resume), so that the
// session's pings renew them and they count against its capacity. It runs
// in one transaction: the session row is locked, and each proof is checked
// as a completion proof is (the attempt RUNNING, the secret compared in
// constant time, the epoch, the task RUNNING under that attempt, the
// attempt of the session's queue). A valid lease gets the session and a
// lease_until of now + leaseDuration; an invalid one is skipped and keeps
// answering TASK_LEASE_LOST. A repeated attempt is adopted once, and no
// lease is adopted beyond the session's capacity. WorkerSessionAdopt returns the
// attempt ids adopted, in the order of proofs; a closed session adopts
// nothing. The proofs' QueueID is ignored: the session's queue applies.
func (s *Store) WorkerSessionAdopt(ctx context.Context, sessionID string, proofs []Proof, leaseDuration time.Duration) ([]string, error) {
	var adopted []string
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		adopted = nil
		queueID, capacity, held, open, err := sessionLock(ctx, tx, sessionID)
		if err != nil || !open {
			return err
		}
		seen := make(map[string]bool, len(proofs))
		for _, p := range proofs {
			if held >= capacity {
				break
			}
			if seen[p.AttemptID] {
				continue
			}
			seen[p.AttemptID] = true
			p.QueueID = queueID
			ok, err := adoptable(ctx, tx, &p)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE task_attempts SET session_id = ?, lease_until = ? WHERE id = ?`,
				sessionID, db.Now().Add(leaseDuration), p.AttemptID); err != nil {
				return err
			}
			adopted = append(adopted, p.AttemptID)
			held++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: adopt leases: %w", err)
	}
	return adopted, nil
}

// adoptable locks the attempt and the task of p and reports whether p holds
// the task's current, running lease, as Complete would accept it.
func adoptable(ctx context.Context, tx *sql.Tx, p *Proof) (bool, error) {
	a, err := attemptLock(ctx, tx, p)
	if errors.Is(err, errLeaseLost) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if a.state != AttemptRunning {
		return false, nil
	}
	t, err := taskLock(ctx, tx, p.TaskID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return t.State == StateRunning && t.CurrentAttemptID == p.AttemptID, nil
}
