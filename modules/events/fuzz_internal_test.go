package events

import (
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// clientBodies returns a fresh body of every frame a consumer may send, by
// frame type: what the session decodes.
func clientBodies() map[string]any {
	return map[string]any{
		typeHello:  new(helloBody),
		typeAck:    new(ackBody),
		typeExtend: new(extendBody),
		typeNack:   new(nackBody),
		typeReject: new(rejectBody),
		typePing:   new(struct{}),
	}
}

// FuzzEventsFrame (F-3): any text a consumer sends is either a frame with a
// body of its type or a 400 INVALID_ARGUMENT, never a panic.
func FuzzEventsFrame(f *testing.F) {
	wstest.FuzzClientFrames(f, []string{
		`{"protocol_version":"1","type":"events.hello","message_id":"0123456789abcdef0123456789abcdef","body":{"subscription_id":"0123456789abcdef0123456789abcdef","capacity":4}}`,
		`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}`,
		`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","body":{"epoch":1}}`,
		`{"protocol_version":"1","type":"event.extend","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","extend_ms":60000}}`,
		`{"protocol_version":"1","type":"event.nack","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","delay_ms":0,"reason":"busy"}}`,
		`{"protocol_version":"1","type":"event.reject","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","reason":"poison\u0000"}}`,
		`{"protocol_version":"1","type":"events.ping","message_id":"0123456789abcdef0123456789abcdef","body":{}}`,
		`{"protocol_version":"1","type":"events.hello","message_id":"0123456789abcdef0123456789abcdef","body":{"capacity":"4"}}`,
	}, clientBodies)
}
