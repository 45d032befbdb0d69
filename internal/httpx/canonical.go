package httpx

import (
	"bytes"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// canonicalOptions format JSON for idempotency digests (C-14).
var canonicalOptions = []jsontext.Options{
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
	jsontext.ReorderRawObjects(true),
	jsontext.PreserveRawStrings(false),
	jsontext.CanonicalizeRawInts(false),
	jsontext.CanonicalizeRawFloats(false),
	jsontext.EscapeForHTML(false),
	jsontext.EscapeForJS(false),
}

// CanonicalJSON returns the canonical form of the JSON value b, so that two
// requests that differ only in key order or whitespace get the same
// idempotency digest (C-14). Object members are sorted by name (in UTF-16
// code unit order, as RFC 8785 does), insignificant whitespace is removed
// and strings are re-encoded in their shortest form. Numbers keep their
// exact text: 1, 1.0 and 1e0 stay different, and no precision is lost.
// Duplicate names, invalid UTF-8, trailing data and malformed JSON are
// 400 INVALID_ARGUMENT errors.
func CanonicalJSON(b []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(b), canonicalOptions...)
	v, err := dec.ReadValue()
	if err != nil {
		return nil, decodeError(err, b, "input")
	}
	// v is only valid until the next read, so it is formatted first.
	out, err := jsontext.AppendFormat(nil, v, canonicalOptions...)
	if err != nil {
		return nil, decodeError(err, b, "input")
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, &Error{Code: CodeInvalidArgument, Message: "input has data after the JSON value"}
	}
	return out, nil
}
