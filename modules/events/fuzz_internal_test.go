package events

import (
	"errors"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/wsx"
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
	for _, s := range []string{
		`{"protocol_version":"1","type":"events.hello","message_id":"0123456789abcdef0123456789abcdef","body":{"subscription_id":"0123456789abcdef0123456789abcdef","capacity":4}}`,
		`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}`,
		`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","body":{"epoch":1}}`,
		`{"protocol_version":"1","type":"event.extend","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","extend_ms":60000}}`,
		`{"protocol_version":"1","type":"event.nack","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","delay_ms":0,"reason":"busy"}}`,
		`{"protocol_version":"1","type":"event.reject","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","reason":"poison\u0000"}}`,
		`{"protocol_version":"1","type":"events.ping","message_id":"0123456789abcdef0123456789abcdef","body":{}}`,
		`{"protocol_version":"1","type":"events.hello","message_id":"0123456789abcdef0123456789abcdef","body":{"capacity":"4"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := wsx.DecodeFrame(b)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		body, ok := clientBodies()[fr.Type]
		if !ok {
			return
		}
		if err := wsx.DecodeBody(fr, body); err != nil {
			requireInvalidArgument(t, err)
		}
	})
}

func requireInvalidArgument(t *testing.T, err error) {
	t.Helper()
	var e *httpx.Error
	if !errors.As(err, &e) || e.Code != httpx.CodeInvalidArgument {
		t.Fatalf("refusal %v (%T) is not a 400 INVALID_ARGUMENT *httpx.Error", err, err)
	}
}
