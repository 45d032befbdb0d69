package httpx

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// uint64Message explains C-10 to people.
const uint64Message = "must be a canonical decimal string: digits only, no sign, leading zero, fraction or exponent, at most 18446744073709551615"

// ParseUint64 parses a canonical uint64 decimal string (C-10): "0", or a
// non-zero digit followed by digits, within uint64. Anything else, such as
// "", "+1", "-1", "01", "1.0", "1e3" or " 1", is a 400 INVALID_ARGUMENT
// *Error whose message completes a sentence starting with the field name.
func ParseUint64(s string) (uint64, error) {
	if s == "" || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, &Error{Code: CodeInvalidArgument, Message: uint64Message}
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, &Error{Code: CodeInvalidArgument, Message: uint64Message}
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, &Error{Code: CodeInvalidArgument, Message: uint64Message}
	}
	return n, nil
}

// Uint64 is a counter, sequence or revision that travels as a canonical
// decimal string (C-10). It marshals as "123" and unmarshals only from a
// JSON string holding a canonical decimal; a JSON number is an error.
// An optional Uint64 field is declared as *Uint64.
type Uint64 uint64

// MarshalJSON encodes n as a JSON string of decimal digits.
func (n Uint64) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(n), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON decodes a JSON string holding a canonical decimal.
func (n *Uint64) UnmarshalJSON(b []byte) error {
	if jsontext.Value(b).Kind() != '"' {
		return &Error{Code: CodeInvalidArgument, Message: uint64Message}
	}
	s, err := jsontext.AppendUnquote(nil, b)
	if err != nil {
		return &Error{Code: CodeInvalidArgument, Message: uint64Message}
	}
	v, err := ParseUint64(string(s))
	if err != nil {
		return err
	}
	*n = Uint64(v)
	return nil
}

// ValidID reports whether s is an ID of C-11: 32 lowercase hexadecimal
// characters.
func ValidID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidName reports whether s is a name of C-11 of at most maxLen characters:
// ASCII only, a letter or digit first, then letters, digits, '.', '_' and
// '-'. Names are limited to 128 characters, receiver names to 64.
func ValidName(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// FormatTime formats t as RFC 3339 in UTC with a "Z" (C-11), with as many
// fractional digits as t needs and none when it falls on a whole second:
// "2026-09-17T10:00:00Z", "2026-09-17T10:00:00.25Z".
func FormatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ValidIdempotencyKey reports whether s is an idempotency key of C-13:
// 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', '-' and ':'.
func ValidIdempotencyKey(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' && c != ':' {
			return false
		}
	}
	return true
}

// IdempotencyKey returns the Idempotency-Key header of a management write
// (C-13). A missing, repeated or malformed header is a 400 INVALID_ARGUMENT
// *Error; the message never repeats the header value.
func IdempotencyKey(r *http.Request) (string, error) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0:
		return "", &Error{Code: CodeInvalidArgument, Message: "missing Idempotency-Key header"}
	case len(values) > 1:
		return "", &Error{Code: CodeInvalidArgument, Message: "Idempotency-Key header must be sent once"}
	case !ValidIdempotencyKey(values[0]):
		return "", &Error{Code: CodeInvalidArgument, Message: "Idempotency-Key must be 1 to 128 characters of A-Z a-z 0-9 . _ - :"}
	}
	return values[0], nil
}

var (
	_ json.Marshaler   = Uint64(0)
	_ json.Unmarshaler = (*Uint64)(nil)
)
