package orbit

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context (W3C traceparent and tracestate) flows producer → task →
// worker → result event → consumer: SubmitTask sends the span context of
// its ctx as headers, the server keeps it with the task, and task.assign
// and event.deliver carry it back as their member trace. The worker and
// the consumer start each handler's span as a child of it and pass the
// span in the handler's ctx.

// tracerName names the SDK's tracer.
const tracerName = "github.com/orbitrun/orbit/sdk/go"

// Names of the handler spans.
const (
	spanTaskHandle  = "task.handle"
	spanEventHandle = "event.handle"
)

// w3c is the propagator of the protocol, W3C trace context, whatever the
// process-wide propagator is.
var w3c = propagation.TraceContext{}

// traceContext is the member trace of task.assign and event.deliver.
type traceContext struct {
	Parent string `json:"traceparent"`
	State  string `json:"tracestate"`
}

// context returns ctx with c as its remote parent span, or ctx when c is
// nil or not a valid context.
func (c *traceContext) context(ctx context.Context) context.Context {
	if c == nil || c.Parent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": c.Parent}
	if c.State != "" {
		carrier["tracestate"] = c.State
	}
	return w3c.Extract(ctx, carrier)
}

// injectTrace sets traceparent (and tracestate) on h from the span context
// of ctx; it sets nothing when ctx carries none.
func injectTrace(ctx context.Context, h http.Header) {
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// newTracer returns the SDK's tracer of tp, or of the global provider
// (otel.GetTracerProvider) when tp is nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// traceTasks wraps a task handler: each call runs in a span task.handle,
// a child of the task's trace context (a new trace when it has none), and
// the handler's ctx holds that span. A failure outcome marks it an error.
func traceTasks(handler TaskHandler, tp trace.TracerProvider) TaskHandler {
	tracer := newTracer(tp)
	return func(ctx context.Context, t *AssignedTask) (out Outcome) {
		ctx, span := tracer.Start(t.trace.context(ctx), spanTaskHandle, trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("orbit.task.id", t.ID), attribute.String("orbit.queue.id", t.QueueID),
				attribute.String("orbit.attempt.id", t.AttemptID), attribute.Int("orbit.task.attempts", t.Attempts))
		}
		returned := false
		defer func() {
			switch {
			case !returned:
				span.SetStatus(codes.Error, "the task handler panicked")
			case out.kind == outcomeFailed || out.kind == "":
				span.SetStatus(codes.Error, out.code)
			}
			if span.IsRecording() && out.kind != "" {
				span.SetAttributes(attribute.String("orbit.task.outcome", out.kind))
			}
			span.End()
		}()
		out = handler(ctx, t)
		returned = true
		return out
	}
}

// traceEvents wraps an event handler: each call runs in a span
// event.handle, a child of the delivery's trace context (a new trace when
// it has none), and the handler's ctx holds that span. An error marks it
// an error.
func traceEvents(handler EventHandler, tp trace.TracerProvider) EventHandler {
	tracer := newTracer(tp)
	return func(ctx context.Context, d *Delivery) (err error) {
		ctx, span := tracer.Start(d.trace.context(ctx), spanEventHandle, trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("orbit.delivery.id", d.ID), attribute.String("orbit.subscription.id", d.SubscriptionID),
				attribute.String("orbit.event.id", d.Event.ID), attribute.String("orbit.event.type", d.Event.Type),
				attribute.String("orbit.task.id", d.Event.AggregateID), attribute.Int("orbit.delivery.attempts", d.Attempts))
		}
		returned := false
		defer func() {
			switch {
			case !returned:
				span.SetStatus(codes.Error, "the event handler panicked")
			case err != nil:
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		err = handler(ctx, d)
		returned = true
		return err
	}
}
