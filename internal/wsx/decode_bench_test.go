package wsx

import (
	stdjson "encoding/json"
	"testing"
)

// BenchmarkDecodeAckRequest measures what the server does with one
// event.ack a consumer sends: decode the envelope, then the body.
func BenchmarkDecodeAckRequest(b *testing.B) {
	msg := []byte(`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","session_id":"fedcba9876543210fedcba9876543210","body":{"delivery_id":"00112233445566778899aabbccddeeff","epoch":"7","lease_secret":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"}}`)
	type body struct {
		DeliveryID  *string `json:"delivery_id"`
		Epoch       *string `json:"epoch"`
		LeaseSecret *string `json:"lease_secret"`
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := DecodeFrame(msg)
		if err != nil {
			b.Fatal(err)
		}
		var x body
		if err := DecodeBody(f, &x); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDeliver measures what the server does to send one
// event.deliver: build the frame from its body, then encode the frame.
func BenchmarkEncodeDeliver(b *testing.B) {
	type event struct {
		ID                string             `json:"id"`
		Sequence          string             `json:"sequence"`
		Type              string             `json:"type"`
		AggregateKind     string             `json:"aggregate_kind"`
		AggregateID       string             `json:"aggregate_id"`
		AggregateRevision string             `json:"aggregate_revision"`
		OccurredAt        string             `json:"occurred_at"`
		Details           stdjson.RawMessage `json:"details"`
		Snapshot          stdjson.RawMessage `json:"snapshot"`
	}
	type delivery struct {
		ID, SubscriptionID, State string
		Epoch                     string `json:"epoch"`
	}
	body := struct {
		Delivery    delivery `json:"delivery"`
		Event       event    `json:"event"`
		LeaseSecret string   `json:"lease_secret"`
	}{
		Delivery: delivery{ID: "00112233445566778899aabbccddeeff", SubscriptionID: "00112233445566778899aabbccddeeff", State: "LEASED", Epoch: "1"},
		Event: event{ID: "00112233445566778899aabbccddeeff", Sequence: "12345", Type: "task.cancelled", AggregateKind: "task",
			AggregateID: "00112233445566778899aabbccddeeff", AggregateRevision: "2", OccurredAt: "2026-12-03T02:14:29.123456Z",
			Details:  stdjson.RawMessage(`{"reason":"cancelled by the producer","attempts":0}`),
			Snapshot: stdjson.RawMessage(`{"id":"00112233445566778899aabbccddeeff","namespace_id":"00112233445566778899aabbccddeeff","queue_id":"00112233445566778899aabbccddeeff","state":"CANCELLED","revision":"2","attempts":0,"max_attempts":3,"input":{"order":"A-1","amount":1250,"currency":"EUR"},"created_at":"2026-12-03T02:14:29.000000Z","updated_at":"2026-12-03T02:14:29.123456Z"}`)},
		LeaseSecret: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
	}
	b.ReportAllocs()
	for b.Loop() {
		f, err := NewFrame("event.deliver", "", body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.encode(); err != nil {
			b.Fatal(err)
		}
	}
}
