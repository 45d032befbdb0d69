package tasks

import (
	"encoding/json"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
)

// Task states.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateSucceeded   = "SUCCEEDED"
	StateFailed      = "FAILED"
	StateCancelled   = "CANCELLED"
	StateNeedsReview = "NEEDS_REVIEW"
)

// Result-log event types. The first four are results and may be subscribed
// to; task.requeued is logged but never delivered.
const (
	EventSucceeded   = "task.succeeded"
	EventFailed      = "task.failed"
	EventCancelled   = "task.cancelled"
	EventNeedsReview = "task.needs_review"
	EventRequeued    = "task.requeued"
)

// ResultTypes lists the subscribable event types, sorted.
var ResultTypes = []string{EventCancelled, EventFailed, EventNeedsReview, EventSucceeded}

// Reasons recorded in event details.
const (
	reasonCancelRequested = "CANCEL_REQUESTED"
	ReasonWorkerCancelled = "WORKER_CANCELLED"
	ReasonLeaseExpired    = "LEASE_EXPIRED"
	reasonAttemptFailed   = "ATTEMPT_FAILED"
	reasonCompleted       = "COMPLETED"
	reasonWorkerReview    = "WORKER_REPORTED"
	reasonReleased        = "WORKER_RELEASED"
	reasonAssignNotSent   = "ASSIGN_NOT_SENT"
	reasonReviewRequeue   = "REVIEW_REQUEUE"
	reasonReviewResolved  = "REVIEW_RESOLVED"
)

// isFinal reports whether a state is final (NEEDS_REVIEW is final until a
// review acts on it).
func isFinal(state string) bool {
	switch state {
	case StateSucceeded, StateFailed, StateCancelled, StateNeedsReview:
		return true
	}
	return false
}

// Task is a task row.
type Task struct {
	ID               string
	NamespaceID      string
	QueueID          string
	CredentialID     string
	State            string
	Revision         uint64
	Idempotent       bool
	MaxAttempts      int
	Attempts         int
	EffectUncertain  bool
	CancelRequested  bool
	CurrentAttemptID string
	LeaseEpoch       uint64
	Input            json.RawMessage
	Result           json.RawMessage
	ErrorCode        string
	ErrorMessage     string
	AvailableAt      time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
	FinishedAt       *time.Time
	// Trace is the W3C trace context kept with the task (O-5); zero when
	// none. It is never part of the task's wire form.
	Trace tracing.Context
}

// TaskError is the error of a failed task.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TaskView is the wire form of a task (03-tasks-and-workers.md).
type TaskView struct {
	ID               string          `json:"id"`
	QueueID          string          `json:"queue_id"`
	State            string          `json:"state"`
	Revision         httpx.Uint64    `json:"revision"`
	Idempotent       bool            `json:"idempotent"`
	MaxAttempts      int             `json:"max_attempts"`
	Attempts         int             `json:"attempts"`
	EffectUncertain  bool            `json:"effect_uncertain"`
	CancelRequested  bool            `json:"cancel_requested"`
	CurrentAttemptID string          `json:"current_attempt_id,omitempty"`
	Input            json.RawMessage `json:"input,omitzero"`
	Result           json.RawMessage `json:"result,omitzero"`
	Error            *TaskError      `json:"error,omitempty"`
	CreatedAt        string          `json:"created_at"`
	UpdatedAt        string          `json:"updated_at"`
	FinishedAt       string          `json:"finished_at,omitempty"`
}

// view returns the wire form of t; the input is included only when
// withInput is set.
func (t *Task) view(withInput bool) TaskView {
	v := TaskView{
		ID: t.ID, QueueID: t.QueueID, State: t.State, Revision: httpx.Uint64(t.Revision),
		Idempotent: t.Idempotent, MaxAttempts: t.MaxAttempts, Attempts: t.Attempts,
		EffectUncertain: t.EffectUncertain, CancelRequested: t.CancelRequested,
		CurrentAttemptID: t.CurrentAttemptID, Result: t.Result,
		CreatedAt: httpx.FormatTime(t.CreatedAt), UpdatedAt: httpx.FormatTime(t.UpdatedAt),
	}
	if withInput {
		v.Input = t.Input
	}
	if t.ErrorCode != "" || t.ErrorMessage != "" {
		v.Error = &TaskError{Code: t.ErrorCode, Message: t.ErrorMessage}
	}
	if t.FinishedAt != nil {
		v.FinishedAt = httpx.FormatTime(*t.FinishedAt)
	}
	return v
}

// taskSnapshot is the immutable task snapshot carried by an event (seed 001 §6).
type taskSnapshot struct {
	SchemaVersion    int             `json:"schema_version"`
	TaskID           string          `json:"task_id"`
	QueueID          string          `json:"queue_id"`
	State            string          `json:"state"`
	Revision         httpx.Uint64    `json:"revision"`
	EffectUncertain  bool            `json:"effect_uncertain"`
	Result           json.RawMessage `json:"result,omitzero"`
	CurrentAttemptID string          `json:"current_attempt_id,omitempty"`
}

// eventDetails is the metadata of an event: never the task input or a secret.
type eventDetails struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	// ErrorCode is the code a worker or reviewer gave for a failure.
	ErrorCode string `json:"error_code,omitempty"`
}

// Event is a result-log entry in its wire form (seed 001 §6 `event`).
type Event struct {
	ID                string          `json:"id"`
	Sequence          httpx.Uint64    `json:"sequence"`
	Type              string          `json:"type"`
	AggregateKind     string          `json:"aggregate_kind"`
	AggregateID       string          `json:"aggregate_id"`
	AggregateRevision httpx.Uint64    `json:"aggregate_revision"`
	OccurredAt        string          `json:"occurred_at"`
	Details           json.RawMessage `json:"details"`
	Snapshot          json.RawMessage `json:"snapshot"`

	// queueID and namespaceID label the metrics of an event appended by
	// this node, and occurredAt is its time as the intake stores it; they
	// are not part of the wire form.
	queueID, namespaceID string
	occurredAt           time.Time

	// Trace is the trace context of the event's task, read only with the
	// events a claim delivers (EventsBySequence); never part of the event's
	// JSON: event.deliver carries it beside the event, as trace.
	Trace tracing.Context `json:"-"`
}
