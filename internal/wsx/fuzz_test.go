package wsx

import (
	"errors"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
)

// The fuzz targets of F-3 for the frame envelope shared by both WebSocket
// entries and for lease secrets. Seed corpora are in testdata/fuzz; `make
// fuzz` runs them.

func requireInvalidArgument(t *testing.T, err error) {
	t.Helper()
	var e *httpx.Error
	if !errors.As(err, &e) || e.Code != httpx.CodeInvalidArgument {
		t.Fatalf("refusal %v (%T) is not a 400 INVALID_ARGUMENT *httpx.Error", err, err)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"protocol_version":"1","type":"event.ack","message_id":"0123456789abcdef0123456789abcdef","body":{"delivery_id":"x"}}`,
		`{"protocol_version":"1","type":"error","message_id":"0123456789abcdef0123456789abcdef","reply_to":"0123456789abcdef0123456789abcdef","error":{"code":"NOT_FOUND","message":"m"}}`,
		`{"protocol_version":"2","type":"x","message_id":"m"}`, `{"protocol_version":"1","type":null}`,
		`{"protocol_version":"1","protocol_version":"1"}`, `{"body":{"a":1,"a":2}}`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		// An accepted frame encodes and decodes to the same frame.
		enc, err := fr.encode()
		if err != nil {
			t.Fatalf("accepted frame %q does not encode: %v", b, err)
		}
		again, err := DecodeFrame(enc)
		if err != nil {
			t.Fatalf("re-encoded frame %q is refused: %v", enc, err)
		}
		if again.Type != fr.Type || again.MessageID != fr.MessageID || again.ReplyTo != fr.ReplyTo || string(again.Body) != string(fr.Body) {
			t.Fatalf("frame %q round-trips to %+v", b, again)
		}
	})
}

func FuzzParseSecret(f *testing.F) {
	f.Add(NewSecret().Encode())
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		if sec.Encode() != s {
			t.Fatalf("secret %q is accepted but encodes as %q", s, sec.Encode())
		}
	})
}
