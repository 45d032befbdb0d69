package workers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/workers"
)

// The W3C specification's example context, as a producer sends it.
const (
	exampleParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exampleState  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

// longTracestate is a valid tracestate of 3 members and 612 characters,
// longer than a task keeps.
var longTracestate = "k1=" + strings.Repeat("x", 200) + ",k2=" + strings.Repeat("y", 200) + ",k3=" + strings.Repeat("z", 200)

// traceHeader returns the trace context headers of a submit.
func traceHeader(parent, state string) http.Header {
	h := http.Header{"Traceparent": {parent}}
	if state != "" {
		h.Set("Tracestate", state)
	}
	return h
}

// traceMember is the trace member of a frame body.
type traceMember struct {
	Parent string `json:"traceparent"`
	State  string `json:"tracestate"`
}

// traceOf returns the trace member of f's body, nil when it has none.
func traceOf(t testing.TB, f *wstest.Frame) *traceMember {
	t.Helper()
	var body struct {
		Trace *traceMember `json:"trace"`
	}
	if err := json.Unmarshal(f.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Trace
}

// TestO5_AssignCarriesTheTaskTraceContext: the traceparent and tracestate
// a producer sends with POST /v1/tasks reach the worker in task.assign as
// the member trace, on a server that does not trace itself; a task without
// a valid traceparent is assigned without one.
func TestO5_AssignCarriesTheTaskTraceContext(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.connect(t, e.cred, 1)
	e.submit(t, e.cred, submitParams{Input: `{"order_id":42}`, Idempotent: true, Header: traceHeader(exampleParent, exampleState)})
	a := w.assign(t)
	doctest.Check(t, docPath, "workers-assign-traced", a.frame.Raw)
	if got := traceOf(t, a.frame); got == nil || got.Parent != exampleParent || got.State != exampleState {
		t.Fatalf("assign trace %+v, want the submitted context", got)
	}
	w.succeed(t, a)

	cases := map[string]struct {
		header     http.Header
		wantParent string
	}{
		"NoHeader":           {nil, ""},
		"MalformedParent":    {traceHeader("00-not-a-trace-01", ""), ""},
		"ZeroTraceID":        {traceHeader("00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""), ""},
		"TracestateTooLong":  {traceHeader(exampleParent, longTracestate), exampleParent},
		"InvalidTracestate":  {traceHeader(exampleParent, "not a tracestate"), exampleParent},
		"FutureVersionUsed0": {traceHeader("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", ""), exampleParent},
	}
	for _, name := range []string{"NoHeader", "MalformedParent", "ZeroTraceID", "TracestateTooLong", "InvalidTracestate", "FutureVersionUsed0"} {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			e.submit(t, e.cred, submitParams{Header: c.header})
			a := w.assign(t)
			defer w.succeed(t, a)
			got := traceOf(t, a.frame)
			switch {
			case c.wantParent == "" && got != nil:
				t.Errorf("assign trace %+v, want none", got)
			case c.wantParent != "" && (got == nil || got.Parent != c.wantParent || got.State != ""):
				t.Errorf("assign trace %+v, want traceparent %s without tracestate", got, c.wantParent)
			}
		})
	}
}

// TestO5_ServerSpansJoinTheProducersTrace: on a traced server, the submit
// span is a child of the producer's traceparent, the assign and complete
// spans are children of the submit span, and task.assign hands the worker
// the assign span's context.
func TestO5_ServerSpansJoinTheProducersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := servertest.StartTraced(t, tp, workersConfig(func(c *workers.Config) { c.PollInterval = pollInterval }))
	e := &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	e.cred = e.credential(t, "q")
	w := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{Header: traceHeader(exampleParent, exampleState)})
	a := w.assign(t)
	w.succeed(t, a)

	var submit, assign, complete tracetest.SpanStub
	eventually(t, "the submit, assign and complete spans", func() bool {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "task.submit":
				submit = s
			case "task.assign":
				assign = s
			case "task.complete":
				complete = s
			}
		}
		return submit.Name != "" && assign.Name != "" && complete.Name != ""
	})
	producer := trace.SpanContextConfig{}
	producer.TraceID, _ = trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	producer.SpanID, _ = trace.SpanIDFromHex("00f067aa0ba902b7")
	if submit.Parent.TraceID() != producer.TraceID || submit.Parent.SpanID() != producer.SpanID || !submit.Parent.IsRemote() {
		t.Fatalf("submit span's parent %v, want the producer's remote span", submit.Parent)
	}
	if submit.SpanKind != trace.SpanKindServer || !hasAttr(submit, "orbit.task.id", id) {
		t.Errorf("submit span kind %v, attributes %v", submit.SpanKind, submit.Attributes)
	}
	if got := submit.SpanContext.TraceState().String(); got != exampleState {
		t.Errorf("submit span's tracestate %q, want the producer's", got)
	}
	for _, s := range []tracetest.SpanStub{assign, complete} {
		if s.SpanContext.TraceID() != producer.TraceID || s.Parent.SpanID() != submit.SpanContext.SpanID() {
			t.Errorf("%s span: trace %s parent %s, want trace %s parent %s (the submit span)",
				s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), producer.TraceID, submit.SpanContext.SpanID())
		}
		if !hasAttr(s, "orbit.task.id", id) || !hasAttr(s, "orbit.attempt.id", a.AttemptID) {
			t.Errorf("%s span attributes %v", s.Name, s.Attributes)
		}
	}
	want := "00-" + producer.TraceID.String() + "-" + assign.SpanContext.SpanID().String() + "-01"
	if got := traceOf(t, a.frame); got == nil || got.Parent != want || got.State != exampleState {
		t.Errorf("assign trace %+v, want traceparent %s (the assign span) and the producer's tracestate", got, want)
	}
	if !hasAttr(complete, "orbit.task.outcome", "succeeded") {
		t.Errorf("complete span attributes %v", complete.Attributes)
	}
}

// hasAttr reports whether s has the string attribute key=value.
func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key && kv.Value.AsString() == value {
			return true
		}
	}
	return false
}
