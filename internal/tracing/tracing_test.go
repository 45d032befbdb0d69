package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/tracing"
)

const (
	exampleParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exampleState  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

// TestO5_FromHeader: a valid traceparent is kept (normalised to version
// 00), with its tracestate unless that is invalid or too long; anything
// else gives no context, as W3C asks of a receiver.
func TestO5_FromHeader(t *testing.T) {
	t.Parallel()
	long := "k1=" + strings.Repeat("x", 200) + ",k2=" + strings.Repeat("y", 200) + ",k3=" + strings.Repeat("z", 200)
	cases := []struct {
		name, parent, state string
		want                tracing.Context
	}{
		{"Valid", exampleParent, exampleState, tracing.Context{Parent: exampleParent, State: exampleState}},
		{"NoState", exampleParent, "", tracing.Context{Parent: exampleParent}},
		{"None", "", exampleState, tracing.Context{}},
		{"Garbage", "hello", "", tracing.Context{}},
		{"ZeroSpanID", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", tracing.Context{}},
		{"UpperCase", strings.ToUpper(exampleParent), "", tracing.Context{}},
		{"VersionFF", "ff" + exampleParent[2:], "", tracing.Context{}},
		{"FutureVersion", "01" + exampleParent[2:] + "-more", "", tracing.Context{Parent: exampleParent}},
		{"InvalidState", exampleParent, "not a tracestate", tracing.Context{Parent: exampleParent}},
		{"LongState", exampleParent, long, tracing.Context{Parent: exampleParent}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if c.parent != "" {
				h.Set("Traceparent", c.parent)
			}
			if c.state != "" {
				h.Set("Tracestate", c.state)
			}
			if got := tracing.FromHeader(h); got != c.want {
				t.Errorf("FromHeader = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestO5_TracerOffCostsNothing: a Tracer of a node without tracing starts
// no span, hands the parent context on unchanged and allocates nothing.
func TestO5_TracerOffCostsNothing(t *testing.T) {
	tr := tracing.NewTracer(nil, "test")
	parent := tracing.Context{Parent: exampleParent, State: exampleState}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span, got := tr.Start(ctx, "x", trace.SpanKindProducer, parent)
		if c != ctx || span.IsRecording() || got != parent {
			t.Fatal("an off tracer changed something")
		}
		span.End()
	})
	if allocs != 0 || tr.Enabled() {
		t.Errorf("off tracer: %v allocations per Start, enabled %v; want 0, false", allocs, tr.Enabled())
	}
}

// TestO5_TracerOnIsAChildOfTheParent: a span started on a traced node is
// a child of the stored context, and its own context is what goes on.
func TestO5_TracerOnIsAChildOfTheParent(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.NewTracer(tp, "test")
	_, span, got := tr.Start(context.Background(), "x", trace.SpanKindInternal, tracing.Context{Parent: exampleParent, State: exampleState})
	span.End()
	s := exp.GetSpans()[0]
	if s.Parent.SpanID().String() != "00f067aa0ba902b7" || s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("span parent %v trace %v", s.Parent.SpanID(), s.SpanContext.TraceID())
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01"
	if got.Parent != want || got.State != exampleState {
		t.Errorf("context handed on %+v, want traceparent %s and the parent's tracestate", got, want)
	}
}

// TestO5_ExporterURL: an endpoint without a path gets /v1/traces; a bad
// one is refused without being repeated.
func TestO5_ExporterURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":             "http://127.0.0.1:4318/v1/traces",
		"https://otel.example:4318/":        "https://otel.example:4318/v1/traces",
		"http://collector/custom/v1/traces": "http://collector/custom/v1/traces",
	} {
		if got, err := tracing.ExporterURL(in); err != nil || got != want {
			t.Errorf("ExporterURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://collector:4317", "http://user:secret@collector", "http://collector?x=1", "http://"} {
		if _, err := tracing.ExporterURL(bad); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("ExporterURL(%q) = %v; want an error without the URL", bad, err)
		}
	}
}

// BenchmarkTracerStartOff measures a span start on a node without
// tracing: the cost every assign and deliver pays when tracing is off.
func BenchmarkTracerStartOff(b *testing.B) {
	tr := tracing.NewTracer(nil, "bench")
	parent := tracing.Context{Parent: exampleParent}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span, _ := tr.Start(ctx, "x", trace.SpanKindProducer, parent)
		span.End()
	}
}
