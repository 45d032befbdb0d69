// Package tracing carries W3C trace context through Orbit (O-5) and starts
// the server's spans. A task keeps the context its producer sent; the
// frames task.assign and event.deliver hand it on to the worker and the
// consumer. The node exports its own spans with OTLP over HTTP only when
// tracing.otlp_endpoint is set: otherwise there is no tracer provider at
// all, Tracer.Start returns at once without allocating, and contexts are
// still stored and carried for the clients' own spans.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer starts the spans of one part of the server. The zero Tracer, and
// one made from a nil provider, is off.
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns the tracer named name (by convention the Go package
// path) of tp, or an off Tracer when tp is nil.
func NewTracer(tp trace.TracerProvider, name string) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(name)}
}

// Enabled reports whether t starts spans.
func (t Tracer) Enabled() bool { return t.t != nil }

// noSpan is what Start returns when off: the no-op span of an empty
// context, which allocates nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span named name of the given kind whose parent is the
// span of ctx or, when parent is not zero, the remote context parent. It
// returns the context holding the span, the span (which the caller ends)
// and the span's W3C context, which is what to store or send on. When t is
// off it returns ctx, a no-op span and parent unchanged, without
// allocating: callers set attributes only when span.IsRecording().
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, parent Context) (context.Context, trace.Span, Context) {
	if t.t == nil {
		return ctx, noSpan, parent
	}
	return t.start(ctx, name, parent, trace.WithSpanKind(kind))
}

// StartAt is Start for a span that began at start, such as one recorded
// after the work it covers.
func (t Tracer) StartAt(ctx context.Context, name string, kind trace.SpanKind, parent Context, start time.Time) (context.Context, trace.Span, Context) {
	if t.t == nil {
		return ctx, noSpan, parent
	}
	return t.start(ctx, name, parent, trace.WithSpanKind(kind), trace.WithTimestamp(start))
}

func (t Tracer) start(ctx context.Context, name string, parent Context, opts ...trace.SpanStartOption) (context.Context, trace.Span, Context) {
	ctx, span := t.t.Start(parent.ContextWith(ctx), name, opts...)
	if c := FromSpanContext(span.SpanContext()); !c.IsZero() {
		return ctx, span, c
	}
	return ctx, span, parent
}

// Config is what Open needs from the tracing section.
type Config struct {
	// OTLPEndpoint is the OTLP/HTTP traces URL; empty turns tracing off.
	// A URL without a path gets /v1/traces.
	OTLPEndpoint string
	// SampleRatio is the share of root traces sampled, 0 to 1; a span
	// with a parent follows its parent's decision.
	SampleRatio float64
	// ServiceVersion is the resource's service.version.
	ServiceVersion string
}

// Provider is the node's tracer provider, exporting with OTLP/HTTP.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// Open returns the node's provider, or nil when cfg.OTLPEndpoint is empty
// (tracing off). It does not contact the collector: spans are exported in
// batches in the background, and a collector that cannot be reached costs
// dropped spans, logged by OpenTelemetry, never a failed request.
func Open(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.OTLPEndpoint == "" {
		return nil, nil
	}
	endpoint, err := ExporterURL(cfg.OTLPEndpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "orbit"),
		attribute.String("service.version", cfg.ServiceVersion),
	))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return &Provider{sdk: sdk}, nil
}

// TracerProvider returns the provider for NewTracer; nil when p is nil.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still buffered and stops the exporter,
// bounded by ctx. It is safe on a nil Provider and idempotent.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// ExporterURL checks an OTLP/HTTP endpoint: an http or https URL with a
// host, without user information, query or fragment. A URL without a
// path gets the OTLP traces path /v1/traces. Errors never repeat the URL.
func ExporterURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("OTLP endpoint is not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("OTLP endpoint must start with http:// or https://")
	case u.Host == "":
		return "", fmt.Errorf("OTLP endpoint has no host")
	case u.User != nil:
		return "", fmt.Errorf("OTLP endpoint must not contain user information")
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("OTLP endpoint must not contain a query or a fragment")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}
