package events_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/events"
)

// The W3C specification's example context, as a producer sends it.
const (
	exampleParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exampleState  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

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

// TestO5_DeliverCarriesTheTaskTraceContext: event.deliver carries, as
// trace, the context the task's producer sent, on every delivery of the
// task's event, redeliveries included; an event of a task without one is
// delivered without the member.
func TestO5_DeliverCarriesTheTaskTraceContext(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.resultWith(t, e.cred, http.Header{"Traceparent": {exampleParent}, "Tracestate": {exampleState}})
	d := c.deliver(t)
	doctest.Check(t, docPath, "events-deliver-traced", d.frame.Raw)
	if got := traceOf(t, d.frame); got == nil || got.Parent != exampleParent || got.State != exampleState {
		t.Fatalf("deliver trace %+v, want the submitted context", got)
	}
	// Not acknowledged: the lease runs out and the event comes again,
	// with the same context.
	again := c.deliver(t)
	if again.Delivery.ID != d.Delivery.ID || again.Delivery.LeaseEpoch == d.Delivery.LeaseEpoch {
		t.Fatalf("redelivery %s, want delivery %s with a new epoch", again.frame.Body, d.Delivery.ID)
	}
	if got := traceOf(t, again.frame); got == nil || got.Parent != exampleParent || got.State != exampleState {
		t.Fatalf("redelivery trace %+v, want the submitted context", got)
	}
	c.acked(t, again.proof())

	e.result(t, e.cred)
	plain := c.deliver(t)
	if got := traceOf(t, plain.frame); got != nil {
		t.Errorf("deliver trace %+v for a task without one, want none", got)
	}
}

// TestO5_DeliverSpanIsAChildOfTheTask: on a traced server, the
// event.deliver span is a child of the task's submit span and the frame
// hands the consumer the deliver span's context.
func TestO5_DeliverSpanIsAChildOfTheTask(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := servertest.StartTraced(t, tp, eventsConfig(func(c *events.Config) { c.PollInterval = pollInterval }))
	e := &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	e.cred = e.credential(t, servertest.CredentialParams{})
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	taskID := e.resultWith(t, e.cred, http.Header{"Traceparent": {exampleParent}})
	d := c.deliver(t)

	var submit, deliver tracetest.SpanStub
	eventually(t, "the submit and deliver spans", func() bool {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "task.submit":
				submit = s
			case "event.deliver":
				deliver = s
			}
		}
		return submit.Name != "" && deliver.Name != ""
	})
	if deliver.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || deliver.Parent.SpanID() != submit.SpanContext.SpanID() {
		t.Fatalf("deliver span in trace %s with parent %s, want the producer's trace and the submit span %s",
			deliver.SpanContext.TraceID(), deliver.Parent.SpanID(), submit.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range deliver.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["orbit.delivery.id"] != d.Delivery.ID || attrs["orbit.event.id"] != d.Event.ID ||
		attrs["orbit.task.id"] != taskID || attrs["orbit.subscription.id"] != sub {
		t.Errorf("deliver span attributes %v", attrs)
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + deliver.SpanContext.SpanID().String() + "-01"
	if got := traceOf(t, d.frame); got == nil || got.Parent != want {
		t.Errorf("deliver trace %+v, want traceparent %s (the deliver span)", got, want)
	}
}
