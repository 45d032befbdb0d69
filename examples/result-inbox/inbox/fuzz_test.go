package inbox

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzCanonicalize (F-3): the Inbox canonicaliser accepts an event or
// refuses it with ErrInvalidEvent, never panics, and its output is a fixed
// point: canonicalising a canonical form changes nothing, so a redelivered
// event always gets the digest it had.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"type":"task.succeeded","occurred_at":"2026-12-01T10:00:00+02:00","result":{"b":1,"a":[1.0,1e3,"\u00e9"]}}`,
		`{"a":1,"a":2}`, `{"s":"\ud800"}`, `{"occurred_at":"yesterday"}`, `[1]`, `{} {}`, `{"n":-0.0e-0}`, `{"😀":1,"é":2,"z":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Canonicalize(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("refusal %v is not ErrInvalidEvent", err)
			}
			return
		}
		again, err := Canonicalize(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form %q is not a fixed point: %q, %v", c, again, err)
		}
	})
}
