package httpx

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func TestC16_Cursor(t *testing.T) {
	t.Parallel()
	const binding = "subscriptions|88888888888888888888888888888888|99999999999999999999999999999999|queue=11111111111111111111111111111111"
	positions := []struct {
		name string
		c    Cursor
	}{
		{name: "WholeSecond", c: Cursor{CreatedAt: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC), ID: "22222222222222222222222222222222"}},
		{name: "Microseconds", c: Cursor{CreatedAt: time.Date(2026, 9, 17, 10, 0, 0, 123456000, time.UTC), ID: "0123456789abcdef0123456789abcdef"}},
		{name: "Nanoseconds", c: Cursor{CreatedAt: time.Date(2026, 9, 17, 10, 0, 0, 999999999, time.UTC), ID: "ffffffffffffffffffffffffffffffff"}},
		{name: "OtherZone", c: Cursor{CreatedAt: time.Date(2026, 9, 17, 12, 0, 0, 0, time.FixedZone("plus2", 7200)), ID: "00000000000000000000000000000000"}},
		{name: "BeforeEpoch", c: Cursor{CreatedAt: time.Date(1960, 1, 1, 0, 0, 0, 5, time.UTC), ID: "00000000000000000000000000000001"}},
		{name: "ZeroTime", c: Cursor{ID: "00000000000000000000000000000002"}},
		{name: "LastSecondOfYear9999", c: Cursor{CreatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), ID: "00000000000000000000000000000003"}},
	}
	for _, tt := range positions {
		t.Run("RoundTrip"+tt.name, func(t *testing.T) {
			t.Parallel()
			s := EncodeCursor(binding, tt.c)
			if strings.ContainsAny(s, "+/=") {
				t.Fatalf("cursor %q is not unpadded base64url", s)
			}
			got, err := DecodeCursor(s, binding)
			if err != nil {
				t.Fatalf("DecodeCursor: %v", err)
			}
			if !got.CreatedAt.Equal(tt.c.CreatedAt) || got.CreatedAt.Location() != time.UTC || got.ID != tt.c.ID {
				t.Fatalf("DecodeCursor = %+v, want %+v in UTC", got, tt.c)
			}
		})
	}

	c := Cursor{CreatedAt: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC), ID: "22222222222222222222222222222222"}
	valid := EncodeCursor(binding, c)
	raw, err := base64.RawURLEncoding.DecodeString(valid)
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(f func(b []byte) []byte) string {
		return base64.RawURLEncoding.EncodeToString(f(bytes.Clone(raw)))
	}
	const malformed = "cursor is malformed"
	const foreign = "cursor does not belong to this list"
	tests := []struct {
		name    string
		cursor  string
		binding string
		message string
	}{
		{name: "OtherQueue", cursor: valid, binding: strings.Replace(binding, "queue=1", "queue=3", 1), message: foreign},
		{name: "OtherList", cursor: valid, binding: "deliveries|88888888888888888888888888888888|99999999999999999999999999999999|state=", message: foreign},
		{name: "EmptyBinding", cursor: valid, binding: "", message: foreign},
		{name: "Empty", cursor: "", binding: binding, message: malformed},
		{name: "NotBase64", cursor: "!!!!", binding: binding, message: malformed},
		{name: "Padded", cursor: valid + "=", binding: binding, message: malformed},
		{name: "Whitespace", cursor: valid[:10] + " " + valid[10:], binding: binding, message: malformed},
		{name: "StandardAlphabet", cursor: strings.NewReplacer("-", "+", "_", "/").Replace(valid) + "+", binding: binding, message: malformed},
		{name: "Truncated", cursor: valid[:len(valid)-4], binding: binding, message: malformed},
		{name: "Extended", cursor: reencode(func(b []byte) []byte { return append(b, 0) }), binding: binding, message: malformed},
		{name: "OtherVersion", cursor: reencode(func(b []byte) []byte { b[0] = 2; return b }), binding: binding, message: malformed},
		{name: "TamperedBinding", cursor: reencode(func(b []byte) []byte { b[1] ^= 1; return b }), binding: binding, message: foreign},
		{name: "AfterYear9999", cursor: reencode(func(b []byte) []byte { binary.BigEndian.PutUint64(b[17:25], 253402300800); return b }), binding: binding, message: malformed},
		{name: "BeforeYear1", cursor: reencode(func(b []byte) []byte { binary.BigEndian.PutUint64(b[17:25], uint64(minCursorSeconds-1)); return b }), binding: binding, message: malformed},
		{name: "NanosecondsOutOfRange", cursor: reencode(func(b []byte) []byte { copy(b[25:29], []byte{0xff, 0xff, 0xff, 0xff}); return b }), binding: binding, message: malformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeCursor(tt.cursor, tt.binding)
			wantInvalid(t, err, tt.message)
		})
	}

	t.Run("BindingNotStored", func(t *testing.T) {
		t.Parallel()
		if bytes.Contains(raw, []byte("88888888")) || bytes.Contains(raw, []byte("subscriptions")) {
			t.Fatalf("cursor bytes %x contain the binding", raw)
		}
		if len(raw) != cursorLen {
			t.Fatalf("cursor is %d bytes, want %d", len(raw), cursorLen)
		}
	})

	t.Run("InvalidIDPanics", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Fatal("EncodeCursor with an invalid ID did not panic")
			}
		}()
		EncodeCursor(binding, Cursor{ID: "ABC"})
	})
}
