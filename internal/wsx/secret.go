package wsx

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orbitrun/orbit/internal/httpx"
)

// secretMessage explains the canonical form to people.
const secretMessage = "must be 32 bytes in canonical unpadded base64url (43 characters)"

// secretLen is the length of an encoded Secret.
const secretLen = 43

// Secret is a lease secret (E-7, T-4): 32 random bytes that travel as
// unpadded base64url, 43 characters. It marshals to that form and
// unmarshals only from it in canonical form (C-18): no padding, no standard
// base64 alphabet, no other length, and the unused low bits of the last
// character zero, so that the text re-encodes to itself. It never prints
// itself: String and LogValue return "[secret]"; Encode returns the text.
type Secret [32]byte

// NewSecret returns a Secret from crypto/rand.
func NewSecret() Secret {
	var s Secret
	_, _ = rand.Read(s[:]) // crypto/rand.Read never fails.
	return s
}

// ParseSecret parses the canonical text of a Secret. Anything else is a
// 400 INVALID_ARGUMENT *httpx.Error whose message completes a sentence
// starting with the field name and never repeats the input.
func ParseSecret(s string) (Secret, error) {
	var out Secret
	if len(s) != secretLen {
		return out, &httpx.Error{Code: httpx.CodeInvalidArgument, Message: secretMessage}
	}
	n, err := base64.RawURLEncoding.Strict().Decode(out[:], []byte(s))
	if err != nil || n != len(out) || base64.RawURLEncoding.EncodeToString(out[:]) != s {
		return Secret{}, &httpx.Error{Code: httpx.CodeInvalidArgument, Message: secretMessage}
	}
	return out, nil
}

// Encode returns the canonical text of s, for the wire only.
func (s Secret) Encode() string {
	return base64.RawURLEncoding.EncodeToString(s[:])
}

// String hides the secret from fmt.
func (s Secret) String() string { return "[secret]" }

// LogValue hides the secret from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue("[secret]") }

// MarshalJSON encodes s as a JSON string of its canonical text.
func (s Secret) MarshalJSON() ([]byte, error) {
	return jsontext.AppendQuote(nil, s.Encode())
}

// UnmarshalJSON decodes a JSON string holding the canonical text.
func (s *Secret) UnmarshalJSON(b []byte) error {
	if jsontext.Value(b).Kind() != '"' {
		return &httpx.Error{Code: httpx.CodeInvalidArgument, Message: secretMessage}
	}
	text, err := jsontext.AppendUnquote(nil, b)
	if err != nil {
		return &httpx.Error{Code: httpx.CodeInvalidArgument, Message: secretMessage}
	}
	v, err := ParseSecret(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

var (
	_ json.Marshaler   = Secret{}
	_ json.Unmarshaler = (*Secret)(nil)
	_ fmt.Stringer     = Secret{}
	_ slog.LogValuer   = Secret{}
)
