package wsx

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orbitrun/orbit/internal/httpx"
)

// ProtocolVersion is the only protocol_version of C-18.
const ProtocolVersion = "1"

// MaxFrameBytes is the largest frame accepted or sent (C-17). A larger
// incoming frame closes the connection with 1009.
const MaxFrameBytes = httpx.MaxBodyBytes

// TypeError is the type of every error frame (E-15).
const TypeError = "error"

// maxTypeLen bounds the type of a frame.
const maxTypeLen = 64

// Frame is the envelope of every message in both directions (C-18):
//
//	{"protocol_version": "1", "type": …, "message_id": …,
//	 "session_id"?: …, "reply_to"?: …, "body"?: {…} | "error"?: {…}}
//
// An empty SessionID or ReplyTo, a nil Body and a nil Error are absent from
// the JSON. Body holds the raw JSON object of the body; protocols decode it
// with DecodeBody and build it with NewFrame.
type Frame struct {
	ProtocolVersion string         `json:"protocol_version"`
	Type            string         `json:"type"`
	MessageID       string         `json:"message_id"`
	SessionID       string         `json:"session_id,omitzero"`
	ReplyTo         string         `json:"reply_to,omitzero"`
	Body            jsontext.Value `json:"body,omitzero"`
	Error           *FrameError    `json:"error,omitzero"`
}

// FrameError is the error of an error frame (E-15). The codes are those of
// C-7 plus the protocols' own, such as DELIVERY_LEASE_LOST. The message is
// for people and never contains secrets.
type FrameError struct {
	Code    httpx.Code `json:"code"`
	Message string     `json:"message"`
}

// NewID returns a new random ID of C-11 (32 lowercase hexadecimal
// characters from crypto/rand), used for message ids and session ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}

// NewFrame returns a frame of type typ answering replyTo ("" for a frame
// that answers nothing) whose body is body encoded as JSON. body must encode
// as a JSON object; a nil body leaves the body absent. The protocol
// version, message id and session id are filled in by Conn.Send.
func NewFrame(typ, replyTo string, body any) (*Frame, error) {
	f := &Frame{Type: typ, ReplyTo: replyTo}
	if body != nil {
		b, err := json.Marshal(body, json.Deterministic(true))
		if err != nil {
			return nil, fmt.Errorf("wsx: encode %s body: %w", typ, encodeCause(err))
		}
		f.Body = b
	}
	return f, nil
}

// ErrorFrame returns an error frame (E-15) answering replyTo ("" when it
// answers no request) with code and message. The message must not contain
// secrets.
func ErrorFrame(replyTo string, code httpx.Code, message string) *Frame {
	return &Frame{Type: TypeError, ReplyTo: replyTo, Error: &FrameError{Code: code, Message: message}}
}

// wireFrame is the envelope as it is decoded: every member raw, so that
// presence, null and JSON types can be told apart.
type wireFrame struct {
	ProtocolVersion jsontext.Value `json:"protocol_version"`
	Type            jsontext.Value `json:"type"`
	MessageID       jsontext.Value `json:"message_id"`
	SessionID       jsontext.Value `json:"session_id"`
	ReplyTo         jsontext.Value `json:"reply_to"`
	Body            jsontext.Value `json:"body"`
	Error           jsontext.Value `json:"error"`
}

// wireError is the error member as it is decoded.
type wireError struct {
	Code    *string `json:"code"`
	Message *string `json:"message"`
}

// DecodeFrame decodes one text frame under the strict rules of C-8 and
// C-18: no unknown or other-case members, no duplicate names at any depth
// (including inside the body), valid UTF-8, nothing after the object, and
// the envelope rules of Frame.Validate. No member may be null. Every
// failure is a 400 INVALID_ARGUMENT *httpx.Error whose message names the
// member at fault and never repeats its value; a connection closes with
// 1008 on it.
func DecodeFrame(b []byte) (*Frame, error) {
	var w wireFrame
	if err := httpx.DecodeJSONBytes(b, &w); err != nil {
		return nil, err
	}
	var f Frame
	var err error
	if f.ProtocolVersion, err = wireString(w.ProtocolVersion, "protocol_version", true); err != nil {
		return nil, err
	}
	if f.Type, err = wireString(w.Type, "type", true); err != nil {
		return nil, err
	}
	if f.MessageID, err = wireString(w.MessageID, "message_id", true); err != nil {
		return nil, err
	}
	if f.SessionID, err = wireString(w.SessionID, "session_id", false); err != nil {
		return nil, err
	}
	if f.ReplyTo, err = wireString(w.ReplyTo, "reply_to", false); err != nil {
		return nil, err
	}
	if w.SessionID != nil && f.SessionID == "" {
		return nil, invalidf("field %q must be 32 lowercase hexadecimal characters", "session_id")
	}
	if w.ReplyTo != nil && f.ReplyTo == "" {
		return nil, invalidf("field %q must be 32 lowercase hexadecimal characters", "reply_to")
	}
	if w.Body != nil {
		if w.Body.Kind() != '{' {
			return nil, invalidf("field %q must be an object", "body")
		}
		f.Body = w.Body.Clone()
	}
	if w.Error != nil {
		if w.Error.Kind() != '{' {
			return nil, invalidf("field %q must be an object", "error")
		}
		var we wireError
		if err := httpx.DecodeJSONBytes(w.Error, &we); err != nil {
			var he *httpx.Error
			if errors.As(err, &he) {
				return nil, invalidf("field %q: %s", "error", he.Message)
			}
			return nil, err
		}
		if we.Code == nil || we.Message == nil {
			return nil, invalidf("field %q must have a code and a message", "error")
		}
		f.Error = &FrameError{Code: httpx.Code(*we.Code), Message: *we.Message}
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// wireString returns the JSON string v of the member name, "" when the
// member is absent. A required member that is absent, null or not a string
// is an error.
func wireString(v jsontext.Value, name string, required bool) (string, error) {
	if v == nil {
		if required {
			return "", invalidf("missing required field %q", name)
		}
		return "", nil
	}
	if v.Kind() != '"' {
		return "", invalidf("field %q must be a string", name)
	}
	s, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return "", invalidf("field %q must be a string", name)
	}
	return string(s), nil
}

// Validate checks the envelope rules of C-18 and E-15 and returns a 400
// INVALID_ARGUMENT *httpx.Error for the first one f breaks:
//
//   - protocol_version is "1";
//   - type is 1 to 64 characters of a-z, 0-9, '.' and '_';
//   - message_id, and session_id and reply_to when present, are IDs of C-11;
//   - a body, when present, is a JSON object;
//   - an error frame (type "error") has an error with a code of 1 to 64
//     characters of A-Z and '_', and no body; other frames have no error.
//
// It does not check the session id against the connection's session; Conn
// does that.
func (f *Frame) Validate() error {
	switch {
	case f.ProtocolVersion != ProtocolVersion:
		return invalidf("field %q must be %q", "protocol_version", ProtocolVersion)
	case !validType(f.Type):
		return invalidf("field %q must be 1 to %d characters of a-z, 0-9, '.' and '_'", "type", maxTypeLen)
	case !httpx.ValidID(f.MessageID):
		return invalidf("field %q must be 32 lowercase hexadecimal characters", "message_id")
	case f.SessionID != "" && !httpx.ValidID(f.SessionID):
		return invalidf("field %q must be 32 lowercase hexadecimal characters", "session_id")
	case f.ReplyTo != "" && !httpx.ValidID(f.ReplyTo):
		return invalidf("field %q must be 32 lowercase hexadecimal characters", "reply_to")
	case f.Body != nil && f.Body.Kind() != '{':
		return invalidf("field %q must be an object", "body")
	case f.Type == TypeError && f.Error == nil:
		return invalidf("an error frame must have field %q", "error")
	case f.Type != TypeError && f.Error != nil:
		return invalidf("field %q is only allowed in an error frame", "error")
	case f.Error != nil && f.Body != nil:
		return invalidf("an error frame must not have field %q", "body")
	case f.Error != nil && !validCode(f.Error.Code):
		return invalidf("field %q must be 1 to 64 characters of A-Z and '_'", "error.code")
	}
	return nil
}

func validType(s string) bool {
	if len(s) == 0 || len(s) > maxTypeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '_' {
			return false
		}
	}
	return true
}

func validCode(c httpx.Code) bool {
	if len(c) == 0 || len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if (c[i] < 'A' || c[i] > 'Z') && c[i] != '_' {
			return false
		}
	}
	return true
}

// DecodeBody decodes the body of f into dst under the strict rules of C-8,
// C-10 and C-18, so that dst's fields of type httpx.Uint64 and Secret reject
// non-canonical values. A missing body and every decoding failure are a
// 400 INVALID_ARGUMENT *httpx.Error naming the field as "body.<path>"; the
// protocol answers it with an error frame and keeps the connection (E-15).
// Required fields are declared as pointers and checked afterwards with
// httpx.Required, using paths such as "body.capacity". A dst that is not a
// non-nil pointer is a bug and is reported as a plain error.
func DecodeBody(f *Frame, dst any) error {
	if v := reflect.ValueOf(dst); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("wsx: decode body into %T: not a non-nil pointer", dst)
	}
	if f.Body == nil {
		return invalidf("missing required field %q", "body")
	}
	// Decoding {"body": …} into a struct whose Body holds dst makes the
	// decoder report paths as "body.…".
	wrapped := make([]byte, 0, len(f.Body)+len(`{"body":}`))
	wrapped = append(wrapped, `{"body":`...)
	wrapped = append(wrapped, f.Body...)
	wrapped = append(wrapped, '}')
	holder := struct {
		Body any `json:"body"`
	}{Body: dst}
	return httpx.DecodeJSONBytes(wrapped, &holder)
}

// encode returns the JSON text of f.
func (f *Frame) encode() ([]byte, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return nil, encodeCause(err)
	}
	return b, nil
}

// encodeCause returns the cause of an encoding error of the json packages
// without the JSON pointer they add, which names members of the value
// (a task's input, a result) and so must not reach a log.
func encodeCause(err error) error {
	for {
		if sem, ok := errors.AsType[*json.SemanticError](err); ok {
			if sem.Err == nil {
				return fmt.Errorf("json: cannot encode Go %v", sem.GoType)
			}
			err = sem.Err
			continue
		}
		if syn, ok := errors.AsType[*jsontext.SyntacticError](err); ok {
			if syn.Err == nil {
				return errors.New("jsontext: invalid JSON")
			}
			err = syn.Err
			continue
		}
		return err
	}
}

func invalidf(format string, args ...any) *httpx.Error {
	return httpx.Errorf(httpx.CodeInvalidArgument, format, args...)
}
