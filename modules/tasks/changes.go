package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/orbitrun/orbit/internal/db"
)

// changes are the task transitions of one transaction, made in memory and
// then written together: one UPDATE for every task and one INSERT for every
// event, whatever their number. A batch of completions thus costs the same
// statements as one.
type changes struct {
	tasks  []*Task
	events []*Event
}

// transition moves t to state, bumps its revision and, for a result or a
// requeue, makes the matching event; write saves both.
func (c *changes) transition(t *Task, state, eventType string, details eventDetails) (*Event, error) {
	now := db.Now()
	t.State = state
	t.Revision++
	t.UpdatedAt = now
	if isFinal(state) {
		t.FinishedAt = &now
	} else {
		t.FinishedAt = nil
	}
	c.tasks = append(c.tasks, t)
	if eventType == "" {
		return nil, nil
	}
	details.State = state
	ev, err := newEvent(t, eventType, details, now)
	if err != nil {
		return nil, err
	}
	c.events = append(c.events, ev)
	return ev, nil
}

// write saves the changed tasks and appends the events in tx.
func (c *changes) write(ctx context.Context, tx *sql.Tx) error {
	if err := tasksSave(ctx, tx, c.tasks); err != nil {
		return err
	}
	return eventsAppend(ctx, tx, c.events)
}

// transition is changes.transition for one task, written at once.
func transition(ctx context.Context, tx *sql.Tx, t *Task, state, eventType string, details eventDetails) (*Event, error) {
	var c changes
	ev, err := c.transition(t, state, eventType, details)
	if err != nil {
		return nil, err
	}
	return ev, c.write(ctx, tx)
}

// taskSaveColumns are the mutable columns of a task, in the order of
// taskSaveValues.
var taskSaveColumns = []string{"state", "revision", "max_attempts", "attempts", "effect_uncertain",
	"cancel_requested", "current_attempt_id", "lease_epoch", "result", "error_code",
	"error_message", "available_at", "updated_at", "finished_at"}

// taskSaveValues returns t's mutable columns, NULL where unset.
func taskSaveValues(t *Task) []any {
	var result, attempt, errCode, errMsg any
	if t.Result != nil {
		result = string(t.Result)
	}
	if t.CurrentAttemptID != "" {
		attempt = t.CurrentAttemptID
	}
	if t.ErrorCode != "" {
		errCode = t.ErrorCode
	}
	if t.ErrorMessage != "" {
		errMsg = t.ErrorMessage
	}
	var finished any
	if t.FinishedAt != nil {
		finished = *t.FinishedAt
	}
	return []any{t.State, t.Revision, t.MaxAttempts, t.Attempts, t.EffectUncertain, t.CancelRequested, attempt,
		t.LeaseEpoch, result, errCode, errMsg, t.AvailableAt, t.UpdatedAt, finished}
}

// taskSave writes every mutable column of t.
func taskSave(ctx context.Context, tx *sql.Tx, t *Task) error {
	return tasksSave(ctx, tx, []*Task{t})
}

// tasksSave writes every mutable column of each task, in one UPDATE for up
// to caseRowsPerStatement tasks: a column whose new value is the same for
// all of them is set to that value, the others by a CASE on the id. The
// tasks are locked already, so the statement's WHERE finds each by its key.
// (A join to a derived table of the new values cost more than a millisecond
// per statement whatever its size, this a few tens of microseconds a task.)
func tasksSave(ctx context.Context, tx *sql.Tx, tasks []*Task) error {
	for chunk := range slices.Chunk(tasks, caseRowsPerStatement) {
		if err := tasksSaveChunk(ctx, tx, chunk); err != nil {
			return fmt.Errorf("tasks: save: %w", err)
		}
	}
	return nil
}

// caseRowsPerStatement bounds the rows one statement names in a CASE on
// their ids (tasksSave, attemptsClose, the sequencer's copy into the log),
// and so the size of each CASE.
const caseRowsPerStatement = 64

func tasksSaveChunk(ctx context.Context, tx *sql.Tx, tasks []*Task) error {
	values := make([][]any, len(tasks))
	ids := make([]any, len(tasks))
	for i, t := range tasks {
		values[i] = taskSaveValues(t)
		ids[i] = t.ID
	}
	set := make([]string, len(taskSaveColumns))
	var args []any
	for c, column := range taskSaveColumns {
		if sameColumn(values, c) {
			set[c] = column + " = ?"
			args = append(args, values[0][c])
			continue
		}
		set[c] = column + " = " + db.CaseByID(len(tasks))
		for i, v := range values {
			args = append(args, ids[i], v[c])
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE tasks SET `+strings.Join(set, ", ")+` WHERE id IN (`+db.Placeholders(len(ids))+`)`,
		append(args, ids...)...)
	return err
}

// sameColumn reports whether column c holds one value in every row. Values
// are strings, integers, booleans, times or nil, all comparable; equal
// times that compare unequal only cost a CASE.
func sameColumn(rows [][]any, c int) bool {
	for _, r := range rows[1:] {
		if r[c] != rows[0][c] {
			return false
		}
	}
	return true
}

// eventsAppend appends events to their queues' logs inside tx: one INSERT
// into the intake; the post-commit sequencer gives them their sequences.
func eventsAppend(ctx context.Context, tx *sql.Tx, events []*Event) error {
	if len(events) == 0 {
		return nil
	}
	values := make([]string, len(events))
	args := make([]any, 0, 8*len(events))
	for i, ev := range events {
		values[i] = "(?, ?, ?, ?, ?, ?, ?, ?)"
		args = append(args, ev.queueID, ev.ID, ev.Type, ev.AggregateID, uint64(ev.AggregateRevision), ev.occurredAt,
			[]byte(ev.Details), []byte(ev.Snapshot))
	}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO result_intake (queue_id, event_id, type, task_id, task_revision, occurred_at, details, snapshot)
		VALUES `+strings.Join(values, ", "), args...)
	if err != nil {
		return fmt.Errorf("tasks: append event: %w", err)
	}
	// A multi-row INSERT reports the id of its first row, the lowest.
	first, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("tasks: append event: %w", err)
	}
	for _, ev := range events {
		sequenceAfterCommit(ctx, tx, ev, uint64(first))
	}
	return nil
}
