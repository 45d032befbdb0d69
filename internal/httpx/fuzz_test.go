package httpx

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"
)

// The fuzz targets of F-3 for the strict decoders of this package. Each
// checks more than "no panic": what is accepted must round-trip, and what is
// refused must be a 400 INVALID_ARGUMENT *Error. Their seed corpora are in
// testdata/fuzz; `make fuzz` runs them.

// fuzzBody has a field of every kind the API decodes.
type fuzzBody struct {
	Name     *string           `json:"name"`
	Sequence *Uint64           `json:"sequence"`
	Count    *int              `json:"count"`
	Enabled  *bool             `json:"enabled"`
	Types    []string          `json:"types"`
	Labels   map[string]string `json:"labels"`
	Input    rawJSON           `json:"input"`
}

// rawJSON keeps a member as raw JSON text, as task input is kept.
type rawJSON []byte

// UnmarshalJSON keeps b.
func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

func requireInvalidArgument(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidArgument {
		t.Fatalf("refusal %v (%T) is not a 400 INVALID_ARGUMENT *Error", err, err)
	}
}

func FuzzDecodeJSONBytes(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","sequence":"1","count":2,"enabled":true,"types":["x"],"labels":{"k":"v"},"input":{"a":[1,2,{"b":null}]}}`,
		`{"name":"a","name":"b"}`, `{"Name":"a"}`, `{"sequence":"01"}`, `{"sequence":1}`, `{} {}`, `{"input":` + deep(70) + `}`,
		"{\"name\":\"\xff\"}", `{"labels":{"k":"v","k":"w"}}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v fuzzBody
		if err := DecodeJSONBytes(b, &v); err != nil {
			requireInvalidArgument(t, err)
			return
		}
		// Accepted input is JSON the canonicaliser also accepts: both
		// decoders apply the same rules to duplicates, UTF-8 and trailing data.
		if _, err := CanonicalJSON(b); err != nil {
			t.Fatalf("decoder accepted %q, canonicaliser refused it: %v", b, err)
		}
	})
}

func deep(n int) string {
	return string(bytes.Repeat([]byte("["), n)) + string(bytes.Repeat([]byte("]"), n))
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"\u00e9"]}`, `{"a":1.0,"a":2}`, `"\ud800"`, ` 1e3 `, `{"é":1,"z":2,"😀":3}`, `{}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := CanonicalJSON(b)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		again, err := CanonicalJSON(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form %q is not a fixed point: %q, %v", c, again, err)
		}
	})
}

func FuzzParseUint64(f *testing.F) {
	for _, s := range []string{"0", "1", "18446744073709551615", "18446744073709551616", "01", "+1", "-1", "1e3", " 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseUint64(s)
		if err != nil {
			requireInvalidArgument(t, err)
			if m, perr := strconv.ParseUint(s, 10, 64); perr == nil && strconv.FormatUint(m, 10) == s {
				t.Fatalf("refused the canonical decimal %q", s)
			}
			return
		}
		if strconv.FormatUint(n, 10) != s {
			t.Fatalf("accepted %q as %d, which is not its canonical spelling", s, n)
		}
	})
}

func FuzzDecodeCursor(f *testing.F) {
	const binding = "tasks|c|n|queue=q"
	f.Add(EncodeCursor(binding, Cursor{CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 5, time.UTC), ID: "0123456789abcdef0123456789abcdef"}), binding)
	f.Add(EncodeCursor(binding, Cursor{CreatedAt: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), ID: "ffffffffffffffffffffffffffffffff"}), "other")
	f.Add("AQ", binding)
	f.Add("", "")
	f.Fuzz(func(t *testing.T, s, binding string) {
		c, err := DecodeCursor(s, binding)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		if again := EncodeCursor(binding, c); again != s {
			t.Fatalf("cursor %q decodes to %+v, which encodes as %q", s, c, again)
		}
	})
}
