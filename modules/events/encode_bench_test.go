package events

import (
	"encoding/json"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// BenchmarkEncodeDeliver measures what the server does to send one
// event.deliver of a cancelled task: build the frame from its body, then
// encode the frame as the connection's writer does.
func BenchmarkEncodeDeliver(b *testing.B) {
	now := time.Now()
	until := now.Add(30 * time.Second)
	d := &subscriptions.Delivery{ID: "00112233445566778899aabbccddeeff", SubscriptionID: "00112233445566778899aabbccddeeff",
		EventID: "00112233445566778899aabbccddeeff", Sequence: 12345, Revision: 2, State: "LEASED", CreatedAt: now,
		AvailableAt: now, LeaseEpoch: 1, LeaseUntil: &until, Attempts: 1, AttemptBudget: 10}
	body := deliverBody{
		Delivery: d.View(),
		Event: tasks.Event{ID: "00112233445566778899aabbccddeeff", Sequence: 12345, Type: "task.cancelled", AggregateKind: "task",
			AggregateID: "00112233445566778899aabbccddeeff", AggregateRevision: 2, OccurredAt: "2026-12-03T02:14:29.123456Z",
			Details: json.RawMessage(`{"reason":"cancelled by the producer"}`),
			Snapshot: json.RawMessage(`{"id":"00112233445566778899aabbccddeeff","queue":"payments","state":"CANCELLED","revision":"2",` +
				`"attempts":0,"max_attempts":3,"input":{"order":"A-1","amount":1250,"currency":"EUR"},` +
				`"created_at":"2026-12-03T02:14:29.000000Z","updated_at":"2026-12-03T02:14:29.123456Z"}`)},
		LeaseSecret: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
	}
	b.ReportAllocs()
	for b.Loop() {
		f, err := wsx.NewFrame(typeDeliver, "", body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := jsonv2.Marshal(f); err != nil {
			b.Fatal(err)
		}
	}
}
