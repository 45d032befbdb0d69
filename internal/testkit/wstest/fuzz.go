package wstest

import (
	"errors"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/wsx"
)

// FuzzClientFrames is the fuzz target of a WebSocket entry (F-3): any text
// a client sends is either a frame whose body decodes into its type's body,
// or a 400 INVALID_ARGUMENT, never a panic. seeds are frames to start from;
// bodies returns a fresh body of every frame type the entry decodes (types
// it does not know are left to the entry's own answer).
func FuzzClientFrames(f *testing.F, seeds []string, bodies func() map[string]any) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := wsx.DecodeFrame(b)
		if err != nil {
			RequireInvalidArgument(t, err)
			return
		}
		body, ok := bodies()[fr.Type]
		if !ok {
			return
		}
		if err := wsx.DecodeBody(fr, body); err != nil {
			RequireInvalidArgument(t, err)
		}
	})
}

// RequireInvalidArgument fails t unless err is a 400 INVALID_ARGUMENT
// *httpx.Error, the one answer to bad input.
func RequireInvalidArgument(t testing.TB, err error) {
	t.Helper()
	var e *httpx.Error
	if !errors.As(err, &e) || e.Code != httpx.CodeInvalidArgument {
		t.Fatalf("refusal %v (%T) is not a 400 INVALID_ARGUMENT *httpx.Error", err, err)
	}
}
