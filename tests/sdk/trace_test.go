package sdk_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/workers"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// TestO5_OneTraceFromSubmitToConsumerHandler: a producer's span, the
// server's spans and the SDK's handler spans make one trace, from
// SubmitTask through the worker's WebSocket to the consumer's handler on
// the events WebSocket, against a real server exporting to an in-memory
// exporter: producer → task.submit → task.assign → task.handle (worker),
// task.submit → task.complete, task.submit → event.deliver → event.handle
// (consumer), and each handler finds its own span in its ctx.
func TestO5_OneTraceFromSubmitToConsumerHandler(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := servertest.StartTraced(t, tp,
		eventsSection(func(c *events.Config) { c.PollInterval = consumerPoll }),
		servertest.ModuleConfig("workers", func(c *workers.Config) { c.PollInterval = consumerPoll }))
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: append([]string{"tasks:work"}, allPermissions...)})
	client := newClient(t, srv, cred.Token)
	ctx := context.Background()
	sub, err := client.CreateSubscription(ctx, "trace:create", orbit.CreateSubscriptionRequest{
		Name: "traced", QueueID: cred.QueueID, Types: []string{orbit.EventTypeTaskSucceeded},
	})
	if err != nil {
		t.Fatal(err)
	}

	inWorker := make(chan trace.SpanContext, 1)
	worker, err := orbit.NewWorker(orbit.WorkerConfig{
		BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Logger: testLogger(t), TracerProvider: tp,
		Backoff: orbit.BackoffConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}, func(ctx context.Context, _ *orbit.AssignedTask) orbit.Outcome {
		inWorker <- trace.SpanContextFromContext(ctx)
		return orbit.Succeeded(json.RawMessage(`{"ok":true}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	workCtx, stopWork := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- worker.Run(workCtx) }()
	t.Cleanup(func() {
		stopWork()
		if err := <-worked; err != nil {
			t.Errorf("worker Run = %v", err)
		}
	})
	inConsumer := make(chan trace.SpanContext, 1)
	cfg := orbit.EventConsumerConfig{
		BaseURL: srv.URL, Token: cred.Token, SubscriptionID: sub.Subscription.ID, Logger: testLogger(t), TracerProvider: tp,
		Backoff: orbit.BackoffConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}
	startConsumer(t, cfg, func(ctx context.Context, _ *orbit.Delivery) error {
		inConsumer <- trace.SpanContextFromContext(ctx)
		return nil
	})

	pctx, producer := tp.Tracer("producer").Start(ctx, "producer")
	receipt, err := client.SubmitTask(pctx, "trace:submit", orbit.SubmitTaskRequest{QueueID: cred.QueueID, Input: json.RawMessage(`{}`)})
	producer.End()
	if err != nil {
		t.Fatal(err)
	}
	var workerSpan, consumerSpan trace.SpanContext
	for _, wait := range []struct {
		what string
		ch   chan trace.SpanContext
		into *trace.SpanContext
	}{{"the worker's handler", inWorker, &workerSpan}, {"the consumer's handler", inConsumer, &consumerSpan}} {
		select {
		case *wait.into = <-wait.ch:
		case <-time.After(waitTime):
			t.Fatalf("%s was not called", wait.what)
		}
	}

	names := []string{"producer", "task.submit", "task.assign", "task.handle", "task.complete", "event.deliver", "event.handle"}
	spans := map[string]tracetest.SpanStub{}
	waitUntil(t, waitTime, "every span of the task's way ended", func() bool {
		for _, s := range exp.GetSpans() {
			spans[s.Name] = s
		}
		for _, n := range names {
			if _, ok := spans[n]; !ok {
				return false
			}
		}
		return true
	}, func() string { return "spans: " + spanNames(exp.GetSpans()) })

	traceID := producer.SpanContext().TraceID()
	for _, n := range names {
		if got := spans[n].SpanContext.TraceID(); got != traceID {
			t.Errorf("span %s is in trace %s, want the producer's %s", n, got, traceID)
		}
	}
	parents := map[string]string{
		"task.submit": "producer", "task.assign": "task.submit", "task.handle": "task.assign",
		"task.complete": "task.submit", "event.deliver": "task.submit", "event.handle": "event.deliver",
	}
	for child, parent := range parents {
		if got, want := spans[child].Parent.SpanID(), spans[parent].SpanContext.SpanID(); got != want {
			t.Errorf("span %s has parent %s, want %s (%s)", child, got, want, parent)
		}
	}
	if workerSpan.SpanID() != spans["task.handle"].SpanContext.SpanID() {
		t.Errorf("the worker's handler ctx holds span %s, want task.handle %s", workerSpan.SpanID(), spans["task.handle"].SpanContext.SpanID())
	}
	if consumerSpan.SpanID() != spans["event.handle"].SpanContext.SpanID() {
		t.Errorf("the consumer's handler ctx holds span %s, want event.handle %s", consumerSpan.SpanID(), spans["event.handle"].SpanContext.SpanID())
	}
	for _, n := range []string{"task.submit", "task.assign", "task.handle", "task.complete", "event.deliver", "event.handle"} {
		if !hasTaskID(spans[n], receipt.Task.ID) {
			t.Errorf("span %s lacks orbit.task.id %s: %v", n, receipt.Task.ID, spans[n].Attributes)
		}
	}
}

// hasTaskID reports whether s records the task id.
func hasTaskID(s tracetest.SpanStub, id string) bool {
	for _, kv := range s.Attributes {
		if kv.Key == "orbit.task.id" && kv.Value.AsString() == id {
			return true
		}
	}
	return false
}

// spanNames lists the names of spans, for a failure message.
func spanNames(spans tracetest.SpanStubs) string {
	out := ""
	for _, s := range spans {
		out += s.Name + " "
	}
	return out
}
