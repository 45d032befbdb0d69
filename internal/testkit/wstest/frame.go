package wstest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// ProtocolVersion is the protocol_version of every frame (C-18).
const ProtocolVersion = "1"

// Frame is the envelope of C-18 as this client builds and reads it.
type Frame struct {
	ProtocolVersion string          `json:"protocol_version"`
	Type            string          `json:"type"`
	MessageID       string          `json:"message_id"`
	SessionID       string          `json:"session_id,omitempty"`
	ReplyTo         string          `json:"reply_to,omitempty"`
	Body            json.RawMessage `json:"body,omitempty"`
	Error           *FrameError     `json:"error,omitempty"`
	// Raw is the text that travelled: set on received frames, and on sent
	// frames once they are sent.
	Raw []byte `json:"-"`
}

// FrameError is the error member of an error frame.
type FrameError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// DecodeBody decodes the body of f into dst.
func (f *Frame) DecodeBody(dst any) error {
	if f.Body == nil {
		return fmt.Errorf("wstest: %s frame has no body", f.Type)
	}
	return json.Unmarshal(f.Body, dst)
}

// String returns the raw text of f, or its encoding when it has none yet.
func (f *Frame) String() string {
	if f.Raw != nil {
		return string(f.Raw)
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// NewID returns 32 random lowercase hexadecimal characters, a message id of
// C-18.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}
