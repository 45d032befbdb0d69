package tasks

import (
	"context"
	"fmt"
	"time"
)

// historyLimit bounds the attempts and the events TaskHistory returns
// (a task has at most 100 attempts, and a few events per attempt).
const historyLimit = 200

// AttemptView is one attempt of a task as the console shows it: never its
// lease secret or reply.
type AttemptView struct {
	ID        string
	Epoch     uint64
	State     string
	Outcome   string
	SessionID string
	StartedAt time.Time
	EndedAt   *time.Time
}

// QueueCounts is a queue's live task counts (PENDING, RUNNING,
// NEEDS_REVIEW; each capped at 100,000) and the submission time of its
// oldest PENDING task, nil when none is pending.
type QueueCounts struct {
	Pending, Running, NeedsReview int64
	OldestPending                 *time.Time
}

// QueueCounts returns the live task counts of a queue in one statement on
// ix_tasks_list_state (the same one the orbit_tasks gauge reads). The
// caller checks that its principal may read the queue's tasks.
func (m *Module) QueueCounts(ctx context.Context, queueID string) (QueueCounts, error) {
	counts, oldest, err := queueTaskStats(ctx, m.store.pool(), queueID)
	if err != nil {
		return QueueCounts{}, fmt.Errorf("tasks: %w", err)
	}
	return QueueCounts{Pending: counts[0], Running: counts[1], NeedsReview: counts[2], OldestPending: oldest}, nil
}

// TaskHistory returns a task's attempts in epoch order and the events it
// appended to its queue's result log in revision order (those retention
// has not purged), at most historyLimit of each. The caller checks that
// its principal may read the task (as GET /v1/tasks/{id} does). Three
// indexed reads (the first waits for events not yet sequenced).
func (m *Module) TaskHistory(ctx context.Context, taskID string) ([]AttemptView, []Event, error) {
	q := m.store.pool()
	if err := m.store.awaitSequenced(ctx, taskID); err != nil {
		return nil, nil, err
	}
	rows, err := q.QueryContext(ctx, `
		SELECT id, epoch, state, COALESCE(outcome, ''), session_id, started_at, ended_at
		FROM task_attempts WHERE task_id = ? ORDER BY epoch LIMIT ?`, taskID, historyLimit)
	if err != nil {
		return nil, nil, fmt.Errorf("tasks: attempts: %w", err)
	}
	defer rows.Close()
	var attempts []AttemptView
	for rows.Next() {
		var a AttemptView
		if err := rows.Scan(&a.ID, &a.Epoch, &a.State, &a.Outcome, &a.SessionID, &a.StartedAt, &a.EndedAt); err != nil {
			return nil, nil, fmt.Errorf("tasks: attempts: %w", err)
		}
		attempts = append(attempts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("tasks: attempts: %w", err)
	}
	evRows, err := q.QueryContext(ctx, `
		SELECT id, sequence, type, task_id, task_revision, occurred_at, details, snapshot
		FROM result_events WHERE task_id = ? ORDER BY task_revision LIMIT ?`, taskID, historyLimit)
	if err != nil {
		return nil, nil, fmt.Errorf("tasks: task events: %w", err)
	}
	defer evRows.Close()
	var events []Event
	for evRows.Next() {
		ev, err := scanEvent(evRows)
		if err != nil {
			return nil, nil, err
		}
		events = append(events, ev)
	}
	if err := evRows.Err(); err != nil {
		return nil, nil, fmt.Errorf("tasks: task events: %w", err)
	}
	return attempts, events, nil
}
