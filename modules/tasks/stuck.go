package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
)

// The stuck-work report of tasks (K-14): RUNNING tasks whose current
// attempt began before a cutoff, with the worker session holding it.

// StuckTaskView is a RUNNING task in the stuck-work report: the task with
// the worker session holding its lease and when that attempt began.
type StuckTaskView struct {
	TaskView
	LeaseSessionID string `json:"lease_session_id"`
	LeasedAt       string `json:"leased_at"`
}

// stuckTask is a RUNNING task with its current attempt's session and start.
type stuckTask struct {
	*Task
	SessionID string
	StartedAt time.Time
}

// taskColumnsOf is taskColumns qualified with the tasks table's alias t.
var taskColumnsOf = func() string {
	cols := strings.Split(taskColumns, ",")
	for i, c := range cols {
		cols[i] = "t." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}()

// taskListStuck returns up to page.Limit+1 RUNNING tasks of a queue whose
// current attempt began at or before cutoff, newest first. It reads the
// queue's RUNNING tasks through ix_tasks_list_state, only as many as its
// workers hold, and each one's attempt by primary key.
func taskListStuck(ctx context.Context, q Querier, queueID string, cutoff time.Time, page httpx.ListPage) ([]*stuckTask, error) {
	scan := func(row scanner) (*stuckTask, error) {
		var st stuckTask
		var err error
		st.Task, err = scanTask(rowThen{row, []any{&st.SessionID, &st.StartedAt}})
		if err != nil {
			return nil, err
		}
		return &st, nil
	}
	rows, err := httpx.ListRows(ctx, q, scan, `SELECT `+taskColumnsOf+`, a.session_id, a.started_at
		FROM tasks t JOIN task_attempts a ON a.id = t.current_attempt_id
		WHERE t.queue_id = ? AND a.state = 'RUNNING' AND a.started_at <= ?`, []any{queueID, cutoff}, "t.", StateRunning, page)
	if err != nil {
		return nil, fmt.Errorf("tasks: list stuck: %w", err)
	}
	return rows, nil
}

// rowThen scans a row of the task's columns followed by more columns into
// extra.
type rowThen struct {
	row   scanner
	extra []any
}

// Scan scans the task's columns into dest and the rest into extra.
func (r rowThen) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

var _ scanner = rowThen{}
