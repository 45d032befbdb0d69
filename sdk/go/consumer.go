package orbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/trace"
)

// DefaultConsumerShutdownTimeout is EventConsumerConfig.ShutdownTimeout
// when none is set.
const DefaultConsumerShutdownTimeout = 5 * time.Second

// DefaultMaxLeaseExtension is EventConsumerConfig.MaxLeaseExtension when
// none is set.
const DefaultMaxLeaseExtension = 30 * time.Minute

// defaultReplyTimeout bounds the wait for the answer to a ping or an ACK;
// a connection that does not answer within it is considered lost.
const defaultReplyTimeout = 10 * time.Second

// EventConsumerConfig configures an EventConsumer.
type EventConsumerConfig struct {
	// BaseURL is the server's http or https URL.
	BaseURL string
	// Token is the bearer token; its credential needs events:consume and
	// must own the subscription.
	Token string
	// SubscriptionID names the subscription to consume.
	SubscriptionID string
	// Capacity is how many deliveries each connection may hold leased, 1
	// to MaxEventCapacity; zero means DefaultEventCapacity.
	Capacity int
	// Concurrency bounds the handlers running at once; zero means
	// Capacity. Deliveries beyond it wait, in order, while their leases
	// run.
	Concurrency int
	// MaxLeaseExtension bounds how much longer than its first lease a
	// handler may run: while a handler runs past two thirds of its lease,
	// the consumer extends the lease (event.extend), in total by at most
	// this much; then the lease runs out and the handler's context is
	// cancelled. Zero means DefaultMaxLeaseExtension; negative disables
	// extensions.
	MaxLeaseExtension time.Duration
	// Backoff shapes the delays between reconnections.
	Backoff BackoffConfig
	// ShutdownTimeout bounds the shutdown after Run's context ends: the
	// time to send the acknowledgements that are still due and to get
	// their answers. Zero means DefaultConsumerShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives the consumer's log; nil means slog.Default(). It
	// never receives tokens, lease secrets or event contents.
	Logger *slog.Logger
	// Dialer opens the WebSocket connections, as EventConnConfig.Dialer.
	Dialer *websocket.Dialer
	// TracerProvider makes the span event.handle of each handler call, a
	// child of the trace context of the event's task; the handler's ctx
	// holds it. Nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Trace is the diagnostic hook of EventConnConfig.Trace, called for
	// every frame of every connection. Frames carry lease secrets: never
	// log or keep traced frames in production.
	Trace func(dir string, frame []byte)
	// AckIntents, when set, holds the acknowledgements the receiver
	// committed with its business changes (K-13): they are sent first on
	// every connection and reported back once answered. nil keeps
	// unanswered acknowledgements in memory only.
	AckIntents AckIntentStore
}

// EventHandler handles one delivery. It is called in its own goroutine, up
// to Concurrency at once, possibly more than once for the same event
// (delivery is at least once): it stores the event durably, keyed by
// d.Event.ID, before returning nil, which acknowledges the delivery. Its
// result decides what the consumer tells the server:
//
//   - nil: ACK (event.ack).
//   - Retry(err, after): NACK with that delay (event.nack with delay_ms):
//     the event comes again, with a new proof, after the delay while
//     attempts remain, and is EXPIRED otherwise.
//   - Reject(reason): reject (event.reject): the delivery is set aside as
//     EXPIRED (REJECTED) at once, whatever its attempts.
//   - any other error: NACK without a delay: the subscription's retry
//     policy decides when the event comes again (1 s, then longer, by
//     default).
//
// While a handler runs past two thirds of its lease the consumer extends
// the lease (event.extend), up to MaxLeaseExtension. Its context is
// cancelled when Run shuts down, when an extension is refused (the lease
// was lost: another consumer may get the event) and when the lease runs
// out after the maximum; a handler that panics counts as one that returned
// an error.
type EventHandler func(ctx context.Context, d *Delivery) error

// ConsumerStats are counters of an EventConsumer since it was created.
type ConsumerStats struct {
	// Delivered counts the deliveries received, redeliveries included.
	Delivered uint64
	// Acked counts the acknowledgements the server confirmed, including
	// the Deduplicated ones.
	Acked uint64
	// Deduplicated counts the confirmations of a proof that had already
	// acknowledged its delivery, such as a proof sent again after a lost
	// answer.
	Deduplicated uint64
	// LeaseLost counts proofs the server refused with DELIVERY_LEASE_LOST:
	// their events are delivered again.
	LeaseLost uint64
	// HandlerErrors counts handler calls that returned an error or
	// panicked.
	HandlerErrors uint64
	// Nacked and Rejected count the NACKs and rejects the server
	// confirmed.
	Nacked, Rejected uint64
	// Extended counts the lease extensions the server confirmed.
	Extended uint64
	// Reconnects counts connections opened after the first one.
	Reconnects uint64
}

// EventConsumer receives the deliveries of one subscription and passes
// each to an EventHandler, over orbit.events.v1 connections that it opens,
// keeps alive and reopens. Create it with NewEventConsumer and start it
// with Run.
type EventConsumer struct {
	cfg     EventConsumerConfig
	handler EventHandler
	log     *slog.Logger
	// replyTimeout bounds the wait for an answer; tests shorten it.
	replyTimeout time.Duration

	delivered, acked, deduplicated, leaseLost, handlerErrors, reconnects atomic.Uint64
	nacked, rejected, extended                                           atomic.Uint64
}

// NewEventConsumer checks cfg, fills in its defaults and returns a consumer
// that will call handler. It does not connect: Run does.
func NewEventConsumer(cfg EventConsumerConfig, handler EventHandler) (*EventConsumer, error) {
	if handler == nil {
		return nil, errors.New("orbit: NewEventConsumer: handler is nil")
	}
	if _, err := checkServer(cfg.BaseURL, cfg.Token); err != nil {
		return nil, fmt.Errorf("orbit: NewEventConsumer: %w", err)
	}
	switch {
	case cfg.SubscriptionID == "":
		return nil, errors.New("orbit: NewEventConsumer: SubscriptionID is empty")
	case cfg.Capacity < 0 || cfg.Capacity > MaxEventCapacity:
		return nil, fmt.Errorf("orbit: NewEventConsumer: Capacity must be 1 to %d", MaxEventCapacity)
	case cfg.Concurrency < 0:
		return nil, errors.New("orbit: NewEventConsumer: Concurrency must not be negative")
	case cfg.Backoff.Initial < 0 || cfg.Backoff.Max < 0 || cfg.ShutdownTimeout < 0:
		return nil, errors.New("orbit: NewEventConsumer: durations must not be negative")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultEventCapacity
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = cfg.Capacity
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff.Initial = DefaultBackoffInitial
	}
	if cfg.Backoff.Max == 0 {
		cfg.Backoff.Max = DefaultBackoffMax
	}
	cfg.Backoff.Max = max(cfg.Backoff.Max, cfg.Backoff.Initial)
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultConsumerShutdownTimeout
	}
	if cfg.MaxLeaseExtension == 0 {
		cfg.MaxLeaseExtension = DefaultMaxLeaseExtension
	}
	c := &EventConsumer{cfg: cfg, handler: traceEvents(handler, cfg.TracerProvider), log: cfg.Logger, replyTimeout: defaultReplyTimeout}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Stats returns the consumer's counters. It is safe to call at any time,
// also while Run runs.
func (c *EventConsumer) Stats() ConsumerStats {
	return ConsumerStats{
		Delivered: c.delivered.Load(), Acked: c.acked.Load(), Deduplicated: c.deduplicated.Load(),
		LeaseLost: c.leaseLost.Load(), HandlerErrors: c.handlerErrors.Load(), Reconnects: c.reconnects.Load(),
		Nacked: c.nacked.Load(), Rejected: c.rejected.Load(), Extended: c.extended.Load(),
	}
}

// Run consumes the subscription until ctx ends, then shuts down and
// returns nil. It connects, reconnecting with backoff and jitter after any
// connection loss; sends events.ping every heartbeat interval of the
// server's welcome; runs the handler for each delivery, at most
// Concurrency at once; acknowledges a delivery only when its handler
// returned nil, and NACKs or rejects it otherwise (see EventHandler); and
// extends the leases of handlers that run long. An acknowledgement whose answer is missing when a
// connection ends is sent again, with the same proof, first thing on the
// next connection, until the server confirms it (possibly as
// Deduplicated) or refuses it. DELIVERY_LEASE_LOST means that a newer lease
// replaced the proof: the proof is dropped and the event will be delivered
// again; it never counts as acknowledged.
//
// When ctx ends, Run stops handing out deliveries (those not started are
// left to run out their leases), cancels the contexts of running handlers,
// sends the acknowledgements of handlers that returned nil, and closes the
// connection with code 1000 once every acknowledgement is answered or
// ShutdownTimeout has passed, whichever comes first. Handlers must return
// once their context is cancelled: Run waits for them.
//
// Run returns an error only when retrying cannot help: the upgrade was
// refused with 400, 401, 403, 404 or 426, or the server answered with
// UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND or EVENT_HISTORY_EXPIRED
// (or INVALID_ARGUMENT to events.hello). Such an error is an *APIError.
// Run may be called again after it returns.
func (c *EventConsumer) Run(ctx context.Context) error {
	r := newConsumerRun(ctx, c)
	defer r.stopBackground()
	return r.run(ctx)
}
