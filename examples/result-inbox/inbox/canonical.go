package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxEventBytes is the largest event Apply accepts (seed 000 §4).
const MaxEventBytes = 512 << 10

// ErrInvalidEvent wraps every reason an event is refused before any
// database work: invalid JSON, duplicate keys, invalid Unicode, too large,
// or inconsistent fields.
var ErrInvalidEvent = errors.New("inbox: invalid event")

// Canonicalize returns the canonical form of an event's JSON: object keys
// sorted by their UTF-8 bytes, no insignificant whitespace, strings
// re-encoded the same way every time, numbers kept as their exact decimal
// text (never through float64), and the event's occurred_at normalised to
// UTC. Two events that differ only in key order, whitespace or the time
// zone of occurred_at have the same canonical form and so the same digest.
// Duplicate keys at any depth, invalid UTF-8 (including unpaired surrogate
// escapes), trailing data and events over MaxEventBytes are refused.
func Canonicalize(raw []byte) ([]byte, error) {
	if len(raw) > MaxEventBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrInvalidEvent, len(raw), MaxEventBytes)
	}
	dec := jsontext.NewDecoder(bytes.NewReader(raw)) // rejects duplicate names and invalid UTF-8 by default
	v, err := readValue(dec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the event object", ErrInvalidEvent)
	}
	obj, ok := v.(object)
	if !ok {
		return nil, fmt.Errorf("%w: the event is not a JSON object", ErrInvalidEvent)
	}
	if at, ok := obj["occurred_at"].(string); ok {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("%w: occurred_at is not an RFC 3339 time", ErrInvalidEvent)
		}
		obj["occurred_at"] = t.UTC().Format(time.RFC3339Nano)
	}
	var out bytes.Buffer
	if err := encode(&out, obj); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// object, array and number are the parsed forms; strings are Go strings,
// booleans bool, null nil.
type (
	object map[string]any
	array  []any
	number string
)

func readValue(dec *jsontext.Decoder) (any, error) {
	switch dec.PeekKind() {
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		obj := object{}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			name := tok.String() // the token is only valid until the next read
			v, err := readValue(dec)
			if err != nil {
				return nil, err
			}
			obj[name] = v
		}
		_, err := dec.ReadToken()
		return obj, err
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		arr := array{}
		for dec.PeekKind() != ']' {
			v, err := readValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.ReadToken()
		return arr, err
	case '0':
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return number(v), nil
	default:
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		switch tok.Kind() {
		case '"':
			return tok.String(), nil
		case 't', 'f':
			return tok.Bool(), nil
		case 'n':
			return nil, nil
		}
		return nil, fmt.Errorf("unexpected JSON token %q", tok.Kind())
	}
}

func encode(out *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case object:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := encodeString(out, k); err != nil {
				return err
			}
			out.WriteByte(':')
			if err := encode(out, v[k]); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	case array:
		out.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := encode(out, e); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case number:
		out.WriteString(string(v))
	case string:
		return encodeString(out, v)
	case bool:
		if v {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("inbox: canonicalize: unexpected %T", v)
	}
	return nil
}

func encodeString(out *bytes.Buffer, s string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
