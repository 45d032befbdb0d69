package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

func TestC10_CanonicalUint64(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{name: "Zero", in: "0", want: 0, ok: true},
		{name: "One", in: "1", want: 1, ok: true},
		{name: "Ten", in: "10", want: 10, ok: true},
		{name: "BeyondFloat64", in: "9007199254740993", want: 9007199254740993, ok: true},
		{name: "Max", in: "18446744073709551615", want: 18446744073709551615, ok: true},
		{name: "Empty", in: ""},
		{name: "PlusSign", in: "+1"},
		{name: "MinusSign", in: "-1"},
		{name: "NegativeZero", in: "-0"},
		{name: "DoubleZero", in: "00"},
		{name: "LeadingZero", in: "01"},
		{name: "Fraction", in: "1.0"},
		{name: "TrailingDot", in: "1."},
		{name: "LeadingDot", in: ".1"},
		{name: "Exponent", in: "1e3"},
		{name: "UpperExponent", in: "1E3"},
		{name: "Hex", in: "0x10"},
		{name: "LeadingSpace", in: " 1"},
		{name: "TrailingSpace", in: "1 "},
		{name: "Underscore", in: "1_000"},
		{name: "MaxPlusOne", in: "18446744073709551616"},
		{name: "TwentyNines", in: "99999999999999999999"},
		{name: "PaddedToFitLength", in: "000000000000000000001"},
		{name: "FullwidthDigit", in: "１"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseUint64(tt.in)
			if !tt.ok {
				wantInvalid(t, err, uint64Message)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseUint64(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestC10_Uint64JSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		N Uint64  `json:"n"`
		P *Uint64 `json:"p,omitempty"`
	}
	t.Run("Marshal", func(t *testing.T) {
		t.Parallel()
		for n, want := range map[Uint64]string{
			0:                    `{"n":"0"}`,
			42:                   `{"n":"42"}`,
			18446744073709551615: `{"n":"18446744073709551615"}`,
		} {
			b, err := json.Marshal(doc{N: n})
			if err != nil || string(b) != want {
				t.Errorf("Marshal(%d) = %s, %v; want %s", n, b, err, want)
			}
		}
		p := Uint64(5)
		b, err := json.Marshal(doc{N: 1, P: &p})
		if err != nil || string(b) != `{"n":"1","p":"5"}` {
			t.Errorf("Marshal with pointer = %s, %v", b, err)
		}
	})
	tests := []struct {
		name    string
		body    string
		want    Uint64
		message string
	}{
		{name: "Zero", body: `{"n":"0"}`, want: 0},
		{name: "Max", body: `{"n":"18446744073709551615"}`, want: 18446744073709551615},
		{name: "Escaped", body: `{"n":"\u0031\u0032"}`, want: 12},
		{name: "Number", body: `{"n":12}`, message: `field "n" ` + uint64Message},
		{name: "Boolean", body: `{"n":true}`, message: `field "n" ` + uint64Message},
		{name: "Object", body: `{"n":{}}`, message: `field "n" ` + uint64Message},
		{name: "Empty", body: `{"n":""}`, message: `field "n" ` + uint64Message},
		{name: "Sign", body: `{"n":"+1"}`, message: `field "n" ` + uint64Message},
		{name: "LeadingZero", body: `{"n":"012"}`, message: `field "n" ` + uint64Message},
		{name: "Fraction", body: `{"n":"1.0"}`, message: `field "n" ` + uint64Message},
		{name: "Exponent", body: `{"n":"1e3"}`, message: `field "n" ` + uint64Message},
		{name: "Overflow", body: `{"n":"18446744073709551616"}`, message: `field "n" ` + uint64Message},
		{name: "Null", body: `{"n":null}`, message: `field "n" must not be null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d doc
			err := DecodeJSONBytes([]byte(tt.body), &d)
			if tt.message != "" {
				wantInvalid(t, err, tt.message)
				return
			}
			if err != nil || d.N != tt.want {
				t.Fatalf("decode %s = %d, %v; want %d", tt.body, d.N, err, tt.want)
			}
		})
	}
}

func TestC11_ValidID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "Digits", in: "11111111111111111111111111111111", want: true},
		{name: "Mixed", in: "0123456789abcdef0123456789abcdef", want: true},
		{name: "Empty", in: ""},
		{name: "Short", in: "0123456789abcdef0123456789abcde"},
		{name: "Long", in: "0123456789abcdef0123456789abcdef0"},
		{name: "UpperCase", in: "0123456789ABCDEF0123456789abcdef"},
		{name: "NotHex", in: "0123456789abcdeg0123456789abcdef"},
		{name: "UUID", in: "01234567-89ab-cdef-0123-456789abcdef"},
		{name: "NonASCII", in: "0123456789abcdef0123456789abcdé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ValidID(tt.in); got != tt.want {
				t.Fatalf("ValidID(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestC11_ValidName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		max  int
		want bool
	}{
		{name: "Simple", in: "object-results", max: 128, want: true},
		{name: "OneLetter", in: "a", max: 128, want: true},
		{name: "OneDigit", in: "7", max: 128, want: true},
		{name: "AllowedPunctuation", in: "A1.b_c-d", max: 128, want: true},
		{name: "AtMax", in: strings.Repeat("a", 128), max: 128, want: true},
		{name: "OverMax", in: strings.Repeat("a", 129), max: 128},
		{name: "ReceiverAtMax", in: strings.Repeat("r", 64), max: 64, want: true},
		{name: "ReceiverOverMax", in: strings.Repeat("r", 65), max: 64},
		{name: "Empty", in: "", max: 128},
		{name: "LeadingDot", in: ".a", max: 128},
		{name: "LeadingUnderscore", in: "_a", max: 128},
		{name: "LeadingDash", in: "-a", max: 128},
		{name: "Space", in: "a b", max: 128},
		{name: "Slash", in: "a/b", max: 128},
		{name: "Colon", in: "a:b", max: 128},
		{name: "NonASCII", in: "café", max: 128},
		{name: "NUL", in: "a\x00", max: 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ValidName(tt.in, tt.max); got != tt.want {
				t.Fatalf("ValidName(%q, %d) = %v, want %v", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func TestC11_FormatTime(t *testing.T) {
	t.Parallel()
	plus2 := time.FixedZone("plus2", 2*60*60)
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{name: "WholeSecond", in: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC), want: "2026-09-17T10:00:00Z"},
		{name: "OtherZone", in: time.Date(2026, 9, 17, 12, 0, 0, 0, plus2), want: "2026-09-17T10:00:00Z"},
		{name: "Microseconds", in: time.Date(2026, 9, 17, 10, 0, 0, 123456000, time.UTC), want: "2026-09-17T10:00:00.123456Z"},
		{name: "TrailingZerosTrimmed", in: time.Date(2026, 9, 17, 10, 0, 0, 250000000, time.UTC), want: "2026-09-17T10:00:00.25Z"},
		{name: "Nanoseconds", in: time.Date(2026, 9, 17, 10, 0, 0, 1, time.UTC), want: "2026-09-17T10:00:00.000000001Z"},
		{name: "Local", in: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Local(), want: "2026-01-02T03:04:05Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatTime(tt.in); got != tt.want {
				t.Fatalf("FormatTime = %q, want %q", got, tt.want)
			}
			back, err := time.Parse(time.RFC3339Nano, tt.want)
			if err != nil || !back.Equal(tt.in) {
				t.Fatalf("parsing %q back = %v, %v", tt.want, back, err)
			}
		})
	}
}

func TestC13_IdempotencyKey(t *testing.T) {
	t.Parallel()
	const malformed = "Idempotency-Key must be 1 to 128 characters of A-Z a-z 0-9 . _ - :"
	tests := []struct {
		name    string
		values  []string
		message string
	}{
		{name: "Simple", values: []string{"create-1"}},
		{name: "AllCharacters", values: []string{"AZaz09._-:"}},
		{name: "AtMax", values: []string{strings.Repeat("k", 128)}},
		{name: "Missing", message: "missing Idempotency-Key header"},
		{name: "Empty", values: []string{""}, message: malformed},
		{name: "OverMax", values: []string{strings.Repeat("k", 129)}, message: malformed},
		{name: "Space", values: []string{"a b"}, message: malformed},
		{name: "Slash", values: []string{"a/b"}, message: malformed},
		{name: "Plus", values: []string{"a+b"}, message: malformed},
		{name: "NonASCII", values: []string{"clé"}, message: malformed},
		{name: "Twice", values: []string{"a", "b"}, message: "Idempotency-Key header must be sent once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for _, v := range tt.values {
				r.Header.Add("Idempotency-Key", v)
			}
			got, err := IdempotencyKey(r)
			if tt.message != "" {
				wantInvalid(t, err, tt.message)
				return
			}
			if err != nil || got != tt.values[0] {
				t.Fatalf("IdempotencyKey = %q, %v; want %q", got, err, tt.values[0])
			}
			if !ValidIdempotencyKey(got) {
				t.Fatalf("ValidIdempotencyKey(%q) = false", got)
			}
		})
	}
}
