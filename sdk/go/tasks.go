package orbit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Task states.
const (
	TaskStatePending     = "PENDING"
	TaskStateRunning     = "RUNNING"
	TaskStateSucceeded   = "SUCCEEDED"
	TaskStateFailed      = "FAILED"
	TaskStateCancelled   = "CANCELLED"
	TaskStateNeedsReview = "NEEDS_REVIEW"
)

// Resolutions of ReviewTask.
const (
	ResolutionRequeue   = "requeue"
	ResolutionSucceeded = "succeeded"
	ResolutionFailed    = "failed"
)

// Task is a task as the server reports it. Input and Result keep their JSON
// text exactly, so big integers are not rounded through float64.
type Task struct {
	ID         string `json:"id"`
	QueueID    string `json:"queue_id"`
	State      string `json:"state"`
	Revision   uint64 `json:"revision,string"`
	Idempotent bool   `json:"idempotent"`
	// MaxAttempts is the attempt budget of the task.
	MaxAttempts int `json:"max_attempts"`
	// Attempts counts the attempts started so far; a released attempt does
	// not count.
	Attempts int `json:"attempts"`
	// EffectUncertain is set when an attempt may have had effects that were
	// never reported, such as when a worker's lease expired.
	EffectUncertain bool `json:"effect_uncertain"`
	// CancelRequested is set while a cancel waits for the worker's report.
	CancelRequested  bool   `json:"cancel_requested"`
	CurrentAttemptID string `json:"current_attempt_id,omitempty"`
	// Input is the task input; only GetTask returns it.
	Input json.RawMessage `json:"input,omitempty"`
	// Result is the result as reported, or nil.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the error of a failed task, or nil.
	Error      *TaskError `json:"error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt time.Time  `json:"finished_at,omitzero"`
}

// TaskError is the error a worker or a reviewer gave for a failed task.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TaskResult is the receipt of a task write. Deduplicated is set when the
// idempotency key had been used before with the same request: Task is then
// the task as it was after the original write, not its current state.
type TaskResult struct {
	Task         Task `json:"task"`
	Deduplicated bool `json:"deduplicated"`
}

// SubmitTaskRequest is the body of SubmitTask.
type SubmitTaskRequest struct {
	// QueueID names the queue; it must be within the credential's grants.
	QueueID string `json:"queue_id"`
	// Input is any JSON value of at most 256 KiB; nil is sent as null.
	Input json.RawMessage `json:"input"`
	// Idempotent declares that running the task twice is harmless, which
	// lets the server retry it after failures and lost leases.
	Idempotent bool `json:"idempotent"`
	// MaxAttempts is the attempt budget, 1 to 100; 0 means the server's
	// default (3).
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// SubmitTask creates a task (POST /v1/tasks, permission tasks:submit). The
// span context of ctx, if any, is sent as the W3C traceparent and
// tracestate headers: the server keeps it with the task, and the worker's
// and the consumers' handler spans become its children.
// key is the Idempotency-Key: repeating a call with the same key and
// request returns the original receipt with Deduplicated set, so a caller
// that persists the key before calling may retry safely.
func (c *Client) SubmitTask(ctx context.Context, key string, req SubmitTaskRequest) (*TaskResult, error) {
	if err := checkKey("SubmitTask", key); err != nil {
		return nil, err
	}
	var res TaskResult
	if err := c.do(ctx, http.MethodPost, "/v1/tasks", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// MaxBatchTasks is the largest number of tasks SubmitTasks sends in one
// request.
const MaxBatchTasks = 500

// BatchTask is one task of SubmitTasks: a submission and its own
// idempotency key, scoped as SubmitTask's key, so that submitting the same
// task with the same key through either call creates it once.
type BatchTask struct {
	IdempotencyKey string `json:"idempotency_key"`
	SubmitTaskRequest
}

// BatchTaskResult answers one task of SubmitTasks: Result when the task
// was created (Status 201) or was an earlier submission with the same key
// (Status 200, Result.Deduplicated), or Err, the *APIError the task would
// have had on its own (NOT_FOUND for a queue outside the grants,
// INVALID_ARGUMENT, IDEMPOTENCY_CONFLICT).
type BatchTaskResult struct {
	IdempotencyKey string
	Status         int
	Result         *TaskResult
	Err            error
}

// SubmitTasks submits up to MaxBatchTasks tasks in one request and one
// commit (POST /v1/tasks:batch, permission tasks:submit) and returns a
// result per task, in their order. A task refused on its own does not stop
// the others; the error return is for the batch as a whole (malformed,
// refused, or not answered), in which case nothing may be assumed created:
// retrying with the same keys is safe. Each task needs its own key.
func (c *Client) SubmitTasks(ctx context.Context, batch []BatchTask) ([]BatchTaskResult, error) {
	if len(batch) == 0 || len(batch) > MaxBatchTasks {
		return nil, fmt.Errorf("orbit: SubmitTasks: 1 to %d tasks, got %d", MaxBatchTasks, len(batch))
	}
	for i := range batch {
		if err := checkKey("SubmitTasks", batch[i].IdempotencyKey); err != nil {
			return nil, err
		}
	}
	var reply struct {
		Results []struct {
			IdempotencyKey string          `json:"idempotency_key"`
			Status         int             `json:"status"`
			Data           json.RawMessage `json:"data"`
			Error          *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"results"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/tasks:batch", nil, "", struct {
		Tasks []BatchTask `json:"tasks"`
	}{batch}, &reply); err != nil {
		return nil, err
	}
	if len(reply.Results) != len(batch) {
		return nil, fmt.Errorf("orbit: SubmitTasks: %d results for %d tasks", len(reply.Results), len(batch))
	}
	out := make([]BatchTaskResult, len(batch))
	for i, r := range reply.Results {
		out[i] = BatchTaskResult{IdempotencyKey: r.IdempotencyKey, Status: r.Status}
		if r.Error != nil {
			out[i].Err = &APIError{Status: r.Status, Code: r.Error.Code, Message: r.Error.Message}
			continue
		}
		var res TaskResult
		if err := json.Unmarshal(r.Data, &res); err != nil {
			return nil, fmt.Errorf("orbit: SubmitTasks: result %d: %w", i, err)
		}
		out[i].Result = &res
	}
	return out, nil
}

// GetTask returns the current state of a task, with its input
// (GET /v1/tasks/{id}, permission tasks:read). A task outside the
// credential's queue grants is NOT_FOUND.
func (c *Client) GetTask(ctx context.Context, id string) (*Task, error) {
	var t Task
	if err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, "", nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTasksRequest selects a page of ListTasks.
type ListTasksRequest struct {
	// QueueID names the queue; it is required.
	QueueID string
	// State keeps only tasks in this state (a TaskState constant); empty
	// means every state.
	State string
	// Limit is the page size, 1 to 100; 0 means the server's default (20).
	Limit int
	// Cursor is the NextCursor of the previous page, or empty for the
	// first page. It is valid only with the same QueueID and State.
	Cursor string
}

// TaskPage is one page of ListTasks. NextCursor is empty on the last page.
type TaskPage struct {
	Items      []Task `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListTasks returns the tasks of a queue, newest first, without their input
// (GET /v1/tasks, permission tasks:read).
func (c *Client) ListTasks(ctx context.Context, req ListTasksRequest) (*TaskPage, error) {
	q := url.Values{"queue_id": {req.QueueID}}
	if req.State != "" {
		q.Set("state", req.State)
	}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	var page TaskPage
	if err := c.do(ctx, http.MethodGet, "/v1/tasks", q, "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// CancelTaskRequest is the body of CancelTask.
type CancelTaskRequest struct {
	// Reason is recorded in the audit log; it may be empty.
	Reason string `json:"reason,omitempty"`
}

// CancelTask cancels a task (POST /v1/tasks/{id}:cancel, permission
// tasks:cancel). A PENDING task is CANCELLED at once; a RUNNING task gets
// CancelRequested and ends as its worker reports; a task in a final state is
// STATE_CONFLICT. key is the Idempotency-Key, as for SubmitTask.
func (c *Client) CancelTask(ctx context.Context, id, key string, req CancelTaskRequest) (*TaskResult, error) {
	if err := checkKey("CancelTask", key); err != nil {
		return nil, err
	}
	var res TaskResult
	if err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+":cancel", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ReviewTaskRequest is the body of ReviewTask.
type ReviewTaskRequest struct {
	// ExpectedRevision must equal the task's current revision, otherwise
	// the review is STATE_CONFLICT.
	ExpectedRevision uint64 `json:"expected_revision,string"`
	// Resolution is ResolutionRequeue, ResolutionSucceeded or
	// ResolutionFailed.
	Resolution string `json:"resolution"`
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string `json:"reason"`
	// Result replaces the task's result; nil leaves it out. It is not
	// allowed with ResolutionRequeue.
	Result json.RawMessage `json:"result,omitempty"`
}

// ReviewTask settles or requeues a NEEDS_REVIEW task
// (POST /v1/tasks/{id}:review, permission tasks:review). key is the
// Idempotency-Key, as for SubmitTask.
func (c *Client) ReviewTask(ctx context.Context, id, key string, req ReviewTaskRequest) (*TaskResult, error) {
	if err := checkKey("ReviewTask", key); err != nil {
		return nil, err
	}
	var res TaskResult
	if err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+":review", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
