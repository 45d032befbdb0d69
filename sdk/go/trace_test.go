package orbit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	exampleParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exampleState  = "rojo=00f067aa0ba902b7"
)

func newRecorder(t *testing.T) (*tracetest.InMemoryExporter, trace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

// TestO5_HandlerSpansAreChildrenOfTheCarriedContext: the task and event
// handlers run in a span that is a child of the context task.assign or
// event.deliver carried, and find it in their ctx; a failure marks it an
// error.
func TestO5_HandlerSpansAreChildrenOfTheCarriedContext(t *testing.T) {
	t.Parallel()
	exp, tp := newRecorder(t)
	carried := &traceContext{Parent: exampleParent, State: exampleState}
	var inTask, inEvent trace.SpanContext
	task := traceTasks(func(ctx context.Context, _ *AssignedTask) Outcome {
		inTask = trace.SpanContextFromContext(ctx)
		return Failed("BOOM", "failed")
	}, tp)
	event := traceEvents(func(ctx context.Context, _ *Delivery) error {
		inEvent = trace.SpanContextFromContext(ctx)
		return errors.New("not stored")
	}, tp)
	task(context.Background(), &AssignedTask{ID: "t", trace: carried})
	_ = event(context.Background(), &Delivery{trace: carried})

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, in := range []trace.SpanContext{inTask, inEvent} {
		s := spans[i]
		if s.SpanContext.SpanID() != in.SpanID() {
			t.Errorf("%s: the handler's ctx holds span %s, want its own %s", s.Name, in.SpanID(), s.SpanContext.SpanID())
		}
		if s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" ||
			!s.Parent.IsRemote() || s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("%s: parent %v kind %v, want the carried remote context", s.Name, s.Parent, s.SpanKind)
		}
		if s.SpanContext.TraceState().String() != exampleState || s.Status.Code.String() != "Error" {
			t.Errorf("%s: tracestate %q status %v", s.Name, s.SpanContext.TraceState(), s.Status)
		}
	}
	if spans[0].Name != spanTaskHandle || spans[1].Name != spanEventHandle {
		t.Errorf("span names %q, %q", spans[0].Name, spans[1].Name)
	}
}

// TestO5_HandlerWithoutContextStartsATrace: a task assigned without trace
// runs in a root span.
func TestO5_HandlerWithoutContextStartsATrace(t *testing.T) {
	t.Parallel()
	exp, tp := newRecorder(t)
	traceTasks(func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) }, tp)(context.Background(), &AssignedTask{})
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() || spans[0].Status.Code.String() == "Error" {
		t.Fatalf("spans %+v, want one root span without error", spans)
	}
}

// TestO5_SubmitSendsTraceparent: SubmitTask sends the span context of
// its ctx as traceparent and tracestate, and neither without one.
func TestO5_SubmitSendsTraceparent(t *testing.T) {
	t.Parallel()
	headers := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"request_id":"r","data":{"task":{"id":"t","state":"PENDING","revision":"1"}}}`))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "token")
	if err != nil {
		t.Fatal(err)
	}
	traced := (&traceContext{Parent: exampleParent, State: exampleState}).context(context.Background())
	for _, ctx := range []context.Context{traced, context.Background()} {
		if _, err := c.SubmitTask(ctx, "key-1", SubmitTaskRequest{QueueID: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if h := <-headers; h.Get("Traceparent") != exampleParent || h.Get("Tracestate") != exampleState {
		t.Errorf("traced submit sent traceparent %q tracestate %q", h.Get("Traceparent"), h.Get("Tracestate"))
	}
	if h := <-headers; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Errorf("untraced submit sent traceparent %q tracestate %q", h.Get("Traceparent"), h.Get("Tracestate"))
	}
}
