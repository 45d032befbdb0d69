package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/trace"
)

// Defaults and limits of WorkerConfig.
const (
	DefaultWorkerCapacity  = 1
	MaxWorkerCapacity      = 32
	DefaultShutdownTimeout = 10 * time.Second
	DefaultBackoffInitial  = 500 * time.Millisecond
	// DefaultBackoffMax is small so that a worker or consumer is back
	// within a few seconds of the server's or its database's return,
	// however long the outage lasted: with full jitter a delay is at most
	// 2 s (1 s on average), or the server's Retry-After when that is
	// longer.
	DefaultBackoffMax = 2 * time.Second
)

// welcomeTimeout bounds the wait for worker.welcome after worker.hello.
const welcomeTimeout = 10 * time.Second

// BackoffConfig shapes the delay between connection attempts: exponential
// from Initial, capped at Max, with full jitter (each delay is uniformly
// random between zero and the current cap). A refusal with Retry-After
// (429 CAPACITY_EXCEEDED, 503 UNAVAILABLE) waits at least that long.
// Every failure is retried this way except those Run documents as fatal;
// in particular 503 UNAVAILABLE, which the server answers while its
// database is unreachable, is retried for as long as it lasts, and so is a
// hello refused with CAPACITY_EXCEEDED because the application holds its
// limit of connections across all nodes.
type BackoffConfig struct {
	// Initial is the first cap; zero means DefaultBackoffInitial.
	Initial time.Duration
	// Max is the largest cap; zero means DefaultBackoffMax (2 s). After an
	// outage, reconnecting takes up to Max: a larger Max spares a server
	// that many clients reconnect to, but delays the return to work.
	Max time.Duration
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// BaseURL is the server's http or https URL; the worker connects to
	// ws:// or wss:// {BaseURL}/v1/workers/connect.
	BaseURL string
	// Token is the bearer token; its credential needs tasks:work and a
	// grant on the queue.
	Token string
	// QueueID names the queue to work on.
	QueueID string
	// Capacity is how many handlers may run at once, 1 to
	// MaxWorkerCapacity; zero means DefaultWorkerCapacity.
	Capacity int
	// WorkerName is an optional name the server records for the session.
	WorkerName string
	// Backoff shapes the delays between reconnections.
	Backoff BackoffConfig
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context is cancelled before cancelling theirs. Outcomes the
	// server has not acknowledged twice ShutdownTimeout after the
	// cancellation are abandoned. Zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives the worker's log; nil means slog.Default(). It never
	// receives tokens, lease secrets, task input or results.
	Logger *slog.Logger
	// Dialer opens the WebSocket connections; nil means a dialer with the
	// proxy from the environment. The worker uses a copy with its own
	// sub-protocol, no compression and no cookie jar.
	Dialer *websocket.Dialer
	// TracerProvider makes the span task.handle of each handler call, a
	// child of the trace context the task was submitted with; the
	// handler's ctx holds it. Nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// TaskHandler runs one task. It is called in its own goroutine, up to
// Capacity at once. Its context is cancelled when the server cancels the
// task (t.Cancelled is then closed too) and when Run shuts down and
// ShutdownTimeout has passed; the handler should then stop and return, for
// example Cancelled() or, if it has not started any effect, Release.
// A handler that panics is reported as Failed("HANDLER_PANIC", …).
type TaskHandler func(ctx context.Context, t *AssignedTask) Outcome

// AssignedTask is a task leased to this worker for one attempt.
type AssignedTask struct {
	ID          string
	QueueID     string
	Revision    uint64
	Input       json.RawMessage
	Attempts    int
	MaxAttempts int
	Idempotent  bool
	// AttemptID identifies this attempt.
	AttemptID string
	// Epoch is the lease's epoch.
	Epoch uint64
	// LeaseUntil is when the lease ended as of the assignment; the worker's
	// heartbeat renews it while the connection lasts, and after a reconnect
	// once the new session has resumed it.
	LeaseUntil time.Time
	// Cancelled is closed when the server asks to cancel the task.
	Cancelled <-chan struct{}

	// trace is the task's trace context from task.assign, or nil.
	trace *traceContext
}

// Outcome is what a TaskHandler reports. Build one with Succeeded, Failed,
// NeedsReview, Cancelled or Release; the zero Outcome is reported as
// Failed("NO_OUTCOME", …).
type Outcome struct {
	kind    string // an outcome constant or outcomeRelease
	result  json.RawMessage
	code    string
	message string
}

// outcomeRelease marks an Outcome reported with task.release.
const outcomeRelease = "release"

// Succeeded reports that the task succeeded with result, any JSON value of
// at most 256 KiB nesting at most 62 levels of objects and arrays, or nil
// for none. A result that is not valid JSON, too large or too deep cannot
// be reported: the task is then reported as needing review, without a
// result, and the problem is logged.
func Succeeded(result json.RawMessage) Outcome {
	return Outcome{kind: outcomeSucceeded, result: result}
}

// Failed reports that the attempt failed with an error code and message. An
// idempotent task with attempts left is retried; otherwise it ends FAILED.
func Failed(code, message string) Outcome {
	return Outcome{kind: outcomeFailed, code: code, message: message}
}

// NeedsReview reports that a person must decide what happened, with an
// optional result (nil for none) under the same rules as Succeeded.
func NeedsReview(result json.RawMessage) Outcome {
	return Outcome{kind: outcomeNeedsReview, result: result}
}

// Cancelled reports that the handler stopped because the task was
// cancelled.
func Cancelled() Outcome {
	return Outcome{kind: outcomeCancelled}
}

// Release gives the task back without using an attempt. Return it only
// when no effect of the task was started: the task goes back to PENDING
// (or CANCELLED if a cancel was requested) as if this attempt never
// happened. reason is recorded by the server.
func Release(reason string) Outcome {
	return Outcome{kind: outcomeRelease, message: reason}
}

// Worker runs a TaskHandler for the tasks of one queue over the
// orbit.workers.v1 protocol. Create it with NewWorker and start it with Run.
type Worker struct {
	cfg     WorkerConfig
	handler TaskHandler
	url     string
	header  http.Header
	dialer  *websocket.Dialer
	log     *slog.Logger
}

// NewWorker checks cfg, fills in its defaults and returns a worker that
// will call handler. It does not connect: Run does.
func NewWorker(cfg WorkerConfig, handler TaskHandler) (*Worker, error) {
	if handler == nil {
		return nil, errors.New("orbit: NewWorker: handler is nil")
	}
	base, err := checkServer(cfg.BaseURL, cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("orbit: NewWorker: %w", err)
	}
	switch {
	case cfg.QueueID == "":
		return nil, errors.New("orbit: NewWorker: QueueID is empty")
	case cfg.Capacity < 0 || cfg.Capacity > MaxWorkerCapacity:
		return nil, fmt.Errorf("orbit: NewWorker: Capacity must be 1 to %d", MaxWorkerCapacity)
	case cfg.Backoff.Initial < 0 || cfg.Backoff.Max < 0 || cfg.ShutdownTimeout < 0:
		return nil, errors.New("orbit: NewWorker: durations must not be negative")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultWorkerCapacity
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff.Initial = DefaultBackoffInitial
	}
	if cfg.Backoff.Max == 0 {
		cfg.Backoff.Max = max(DefaultBackoffMax, cfg.Backoff.Initial)
	}
	cfg.Backoff.Max = max(cfg.Backoff.Max, cfg.Backoff.Initial)
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	w := &Worker{cfg: cfg, handler: traceTasks(handler, cfg.TracerProvider), log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.url = websocketURL(base, "/v1/workers/connect")
	w.header = upgradeHeader(cfg.Token)
	w.dialer = newDialer(cfg.Dialer, workerProtocol)
	return w, nil
}

// Run connects to the server and works until ctx is cancelled, then shuts
// down gracefully and returns nil. It reconnects with backoff after any
// connection loss, sends worker.ping every heartbeat interval, runs up to
// Capacity handlers at once and reports their outcomes. After a reconnect,
// the hello asks the server to resume the leases of the handlers still
// running, so that the new session's heartbeat renews them and they count
// against its capacity; a lease the server no longer holds for this worker
// is logged, and its outcome will most likely be refused. An outcome whose
// acknowledgement was lost is sent again, with the same lease proof, after
// reconnecting, until the server acknowledges it or answers
// TASK_LEASE_LOST.
//
// When ctx is cancelled, Run stops starting tasks and releases those it has
// not started, lets running handlers finish for ShutdownTimeout and then
// cancels their contexts, waits for every handler to return and for the
// server to acknowledge the outcomes (reconnecting if needed), and closes
// the connection with code 1000. Outcomes still unacknowledged twice
// ShutdownTimeout after the cancellation are abandoned: the server's lease
// rules settle those tasks. Handlers must return once their context is
// cancelled; Run never abandons a running handler.
//
// Run returns an error only when retrying cannot help: the server refused
// the connection with 400, 401, 403, 404 or 426, or answered with
// UNAUTHENTICATED, PERMISSION_DENIED or NOT_FOUND (or INVALID_ARGUMENT to
// worker.hello). Such an error is an *APIError. Run may be called again
// after it returns; concurrent calls run independent sessions.
func (w *Worker) Run(ctx context.Context) error {
	r := newRunner(ctx, w)
	return r.run(ctx)
}
