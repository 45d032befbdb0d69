package wsx

import (
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
