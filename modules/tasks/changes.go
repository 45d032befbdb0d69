package tasks

import (
	"context"
	"database/sql"
	"fmt"
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

// tasksSave writes every mutable column of each task: one plain UPDATE for
// one task, one UPDATE joined to the new values for several.
func tasksSave(ctx context.Context, tx *sql.Tx, tasks []*Task) error {
	var query string
	var args []any
	switch len(tasks) {
	case 0:
		return nil
	case 1:
		query = `UPDATE tasks SET ` + strings.Join(taskSaveColumns, " = ?, ") + ` = ? WHERE id = ?`
		args = append(taskSaveValues(tasks[0]), tasks[0].ID)
	default:
		rows := make([]string, len(tasks))
		for i, t := range tasks {
			if i == 0 {
				// The first row names the derived table's columns.
				rows[i] = `SELECT ? AS id`
				for _, c := range taskSaveColumns {
					rows[i] += `, ? AS ` + c
				}
			} else {
				rows[i] = `SELECT ?` + strings.Repeat(", ?", len(taskSaveColumns))
			}
			args = append(args, t.ID)
			args = append(args, taskSaveValues(t)...)
		}
		set := make([]string, len(taskSaveColumns))
		for i, c := range taskSaveColumns {
			set[i] = "t." + c + " = v." + c
		}
		// STRAIGHT_JOIN reads the few new values first and looks each task
		// up by its key, whatever the optimizer thinks of the tables' sizes.
		query = `UPDATE (` + strings.Join(rows, " UNION ALL ") + `) v STRAIGHT_JOIN tasks t ON t.id = v.id SET ` + strings.Join(set, ", ")
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("tasks: save: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n > int64(len(tasks)) {
		return fmt.Errorf("tasks: save: %d rows changed for %d tasks", n, len(tasks))
	}
	return nil
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
