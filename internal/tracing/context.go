package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MaxStateLen bounds a stored tracestate. W3C allows 32 list members of up
// to 512 characters together in practice; a longer tracestate is dropped,
// the traceparent kept.
const MaxStateLen = 512

// ParentLen is the length of a version-00 traceparent, the only version
// Orbit writes: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>.
const ParentLen = 55

// Context is a W3C trace context as a task stores it and as the frames
// task.assign and event.deliver carry it (member `trace`). The zero
// Context means none.
type Context struct {
	// Parent is the traceparent header value.
	Parent string `json:"traceparent"`
	// State is the tracestate header value; empty when there is none.
	State string `json:"tracestate,omitzero"`
}

// IsZero reports whether c carries no trace context.
func (c Context) IsZero() bool { return c.Parent == "" }

// w3c is the one propagator Orbit speaks: W3C trace context, whatever
// the process-wide propagator is.
var w3c = propagation.TraceContext{}

// FromHeader returns the trace context of an HTTP request's traceparent
// and tracestate headers, normalised to version 00. A missing or invalid
// traceparent gives the zero Context, as W3C asks of a receiver (the
// request is served, untraced); a tracestate that is invalid or longer
// than MaxStateLen is dropped. It costs a map lookup when the request has
// no traceparent.
func FromHeader(h http.Header) Context {
	if h.Get("Traceparent") == "" {
		return Context{}
	}
	return FromSpanContext(trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.HeaderCarrier(h))))
}

// FromSpanContext returns the W3C form of sc, or the zero Context when sc
// is not valid.
func FromSpanContext(sc trace.SpanContext) Context {
	if !sc.IsValid() {
		return Context{}
	}
	carrier := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	c := Context{Parent: carrier["traceparent"], State: carrier["tracestate"]}
	if len(c.State) > MaxStateLen {
		c.State = ""
	}
	return c
}

// FromContext returns the W3C form of the span context in ctx, or the
// zero Context when ctx carries none.
func FromContext(ctx context.Context) Context {
	return FromSpanContext(trace.SpanContextFromContext(ctx))
}

// SpanContext parses c into a remote span context; it is not valid when c
// is zero or malformed (a stored context is always well formed).
func (c Context) SpanContext() trace.SpanContext {
	if c.IsZero() {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": c.Parent}
	if c.State != "" {
		carrier["tracestate"] = c.State
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), carrier))
}

// ContextWith returns ctx with c as its remote parent span context; ctx
// unchanged when c is zero or malformed.
func (c Context) ContextWith(ctx context.Context) context.Context {
	sc := c.SpanContext()
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Ptr returns &c, or nil for the zero Context: the form of an optional
// frame member that is left out when there is no context.
func (c Context) Ptr() *Context {
	if c.IsZero() {
		return nil
	}
	return &c
}
