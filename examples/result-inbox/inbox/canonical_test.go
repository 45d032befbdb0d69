package inbox

import (
	"errors"
	"strings"
	"testing"
)

func TestR11_CanonicalFormIgnoresKeyOrderWhitespaceAndZone(t *testing.T) {
	t.Parallel()
	a := []byte(`{"b":1,"a":{"y":[1,2.50,12345678901234567890123],"x":"é"},"occurred_at":"2026-09-17T12:00:00+02:00"}`)
	b := []byte("{ \"occurred_at\" : \"2026-09-17T10:00:00Z\",\n \"a\":{\"x\":\"\\u00e9\",\"y\":[1,2.50,12345678901234567890123]},\"b\":1}")
	ca, err := Canonicalize(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Canonicalize(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(ca) != string(cb) {
		t.Fatalf("canonical forms differ:\n%s\n%s", ca, cb)
	}
	if !strings.Contains(string(ca), "12345678901234567890123") || !strings.Contains(string(ca), "2.50") {
		t.Fatalf("numbers must keep their decimal text: %s", ca)
	}
}

func TestR11_RefusesBadJSON(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"DuplicateKey":       `{"a":1,"a":2}`,
		"NestedDuplicateKey": `{"a":{"b":1,"b":1}}`,
		"InvalidUTF8":        "{\"a\":\"\xff\"}",
		"LoneSurrogate":      `{"a":"\ud800"}`,
		"InvalidJSON":        `{"a":}`,
		"TrailingData":       `{"a":1} {}`,
		"NotAnObject":        `[1]`,
		"Oversized":          `{"a":"` + strings.Repeat("x", MaxEventBytes) + `"}`,
		"BadOccurredAt":      `{"occurred_at":"yesterday"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := Canonicalize([]byte(raw)); !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
		})
	}
}

// TestR11_DeepestResultCanonicalises: the server accepts results nesting
// 63 levels (64 for a whole request body); inside an event's snapshot that
// is 65 levels, which Canonicalize must take and keep.
func TestR11_DeepestResultCanonicalises(t *testing.T) {
	t.Parallel()
	const resultDepth = 63
	result := strings.Repeat("[", resultDepth) + "0" + strings.Repeat("]", resultDepth)
	raw := []byte(`{"id":"e1","snapshot":{"result":` + result + `}}`)
	got, err := Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(raw) {
		t.Fatalf("canonical form changed the result:\n%s", got)
	}
}
