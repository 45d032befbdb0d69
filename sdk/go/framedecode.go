package orbit

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// One-pass decoding of the frames that carry the work: event.deliver and
// the ack to event.ack on orbit.events.v1, task.assign on
// orbit.workers.v1.
//
// The general path decodes a message in steps: the envelope with its body
// kept as raw text, then the body by the frame's type, then (for
// event.deliver) the event kept as raw text. Every step is a json.Unmarshal
// that checks the whole of its text and then decodes it, so the event of a
// delivery was read six times. The one-pass path finds the type and the
// raw texts it must keep with a light scan of the message, then decodes the
// message with a single json.Unmarshal into a struct that has the body's
// type in place of the raw body.
//
// Both paths accept and reject the same messages, with the same results:
// the one-pass path is taken only when it cannot differ from the general
// one, and any message it does not accept in full (a decoding error, a
// member given twice, a missing or null body or event, a reply, a name with
// an escape or a non-ASCII byte) goes through the general path, which
// decides and words the outcome as before.

// onePassFrame is a message decoded in one pass: the envelope of frame with
// the body decoded as B instead of kept as raw text.
type onePassFrame[B any] struct {
	ProtocolVersion string    `json:"protocol_version"`
	Type            string    `json:"type"`
	MessageID       string    `json:"message_id"`
	SessionID       string    `json:"session_id,omitempty"`
	ReplyTo         string    `json:"reply_to,omitempty"`
	Body            B         `json:"body"`
	Error           *frameErr `json:"error,omitempty"`
}

// envelope returns f as the general path's frame with body as its raw
// body; the caller attaches the decoded one.
func (f *onePassFrame[B]) envelope(body []byte) frame {
	return frame{ProtocolVersion: f.ProtocolVersion, Type: f.Type, MessageID: f.MessageID, SessionID: f.SessionID,
		ReplyTo: f.ReplyTo, Body: body, Error: f.Error}
}

// deliverOnce is the body of an event.deliver decoded in one pass.
type deliverOnce struct {
	Delivery    EventDelivery `json:"delivery"`
	Event       ResultEvent   `json:"event"`
	LeaseSecret string        `json:"lease_secret"`
	Trace       *traceContext `json:"trace"`
}

// Quoted frame types as the scan compares them.
var (
	quotedDeliver = []byte(`"` + frameEventDeliver + `"`)
	quotedAssign  = []byte(`"` + frameAssign + `"`)
	quotedAck     = []byte(`"` + frameAck + `"`)
)

// decodeEventsOnce decodes message b of orbit.events.v1 in one pass when
// it is an event.deliver that the general path (parseFrame, dispatch,
// decodeDeliver) would turn into a delivery, and returns that delivery; or
// when it is the ack to an event.ack, one that awaitsAck(reply_to) reports,
// whose envelope and body the general path (parseFrame, decodeAck) would
// decode without error, and returns the frame with the decoded body
// attached. It returns false for every other message, valid or not; the
// caller then takes the general path. The texts in the results share b's
// memory.
func decodeEventsOnce(b []byte, awaitsAck func(id string) bool) (*Delivery, frame, bool) {
	var body, env memberScan
	body.names[0] = "event"
	env.names = [3]string{"type", "body", "reply_to"}
	if !env.scan(b, 1, &body) || !isObject(env.vals[1]) {
		return nil, frame{}, false
	}
	switch typ := env.vals[0]; {
	case bytes.Equal(typ, quotedDeliver) && body.vals[0] != nil:
		var f onePassFrame[deliverOnce]
		if err := json.Unmarshal(b, &f); err != nil ||
			f.ProtocolVersion != protocolVersion || f.Type != frameEventDeliver || f.ReplyTo != "" {
			return nil, frame{}, false
		}
		d, err := newDelivery(deliverBody{Delivery: f.Body.Delivery, Event: body.vals[0], LeaseSecret: f.Body.LeaseSecret, Trace: f.Body.Trace}, f.Body.Event)
		return d, frame{}, err == nil
	case bytes.Equal(typ, quotedAck):
		id, ok := plainString(env.vals[2])
		if !ok || id == "" || !awaitsAck(id) {
			return nil, frame{}, false
		}
		f := new(onePassFrame[AckResult])
		if err := json.Unmarshal(b, f); err != nil || f.ProtocolVersion != protocolVersion || f.Type != frameAck || f.ReplyTo != id {
			return nil, frame{}, false
		}
		fr := f.envelope(env.vals[1])
		fr.ack = &f.Body
		return nil, fr, true
	}
	return nil, frame{}, false
}

// plainString returns the text of the JSON string v when it holds no
// escape.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// decodeAssignOnce decodes message b in one pass when it is a task.assign
// whose envelope and body the general path (parseFrame, assignOf) would
// decode without error, and returns the frame with the decoded body
// attached. It returns false for every other message, valid or not; the
// caller then takes the general path. The frame's Body shares b's memory.
func decodeAssignOnce(b []byte) (frame, bool) {
	var env memberScan
	env.names[0], env.names[1] = "type", "body"
	if !env.scan(b, -1, nil) || !bytes.Equal(env.vals[0], quotedAssign) || !isObject(env.vals[1]) {
		return frame{}, false
	}
	f := new(onePassFrame[assignBody])
	if err := json.Unmarshal(b, f); err != nil || f.ProtocolVersion != protocolVersion || f.Type != frameAssign {
		return frame{}, false
	}
	fr := f.envelope(env.vals[1])
	fr.assign = &f.Body
	return fr, true
}

// isObject reports whether the JSON value v is an object.
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// memberScan finds members of a JSON object by name: the ones that
// encoding/json decodes into a struct field named names[k] (lowercase
// ASCII, matched regardless of case, as encoding/json matches such a
// name). Unused slots of names are empty.
type memberScan struct {
	names [3]string
	// vals[k] is the text of the value of names[k], or nil when the
	// object has no such member.
	vals [3][]byte
}

// scan scans the JSON object b, and with inner the value of
// names[within] when it is an object (within -1: none). It returns false
// when it cannot tell the members apart: b is not an object it can read, a
// member name holds an escape or a non-ASCII byte (which encoding/json
// might fold onto a field name), or one of names is given twice. The texts
// found are right only if b is valid JSON: callers trust them once
// encoding/json has accepted b. They cannot grow into the rest of b.
func (s *memberScan) scan(b []byte, within int, inner *memberScan) bool {
	i := skipSpace(b, 0)
	return i < len(b) && b[i] == '{' && s.object(b, i, within, inner) > 0
}

// object scans the object that starts at b[i], as scan does, and returns
// the index just after it, or -1 when it cannot tell its members apart.
func (s *memberScan) object(b []byte, i, within int, inner *memberScan) int {
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		end := stringEnd(b, i)
		if end < 0 {
			return -1
		}
		name := b[i+1 : end-1]
		for _, c := range name {
			if c == '\\' || c >= utf8.RuneSelf {
				return -1
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = skipSpace(b, i+1)
		k := s.index(name)
		var vend int
		if k >= 0 && k == within && i < len(b) && b[i] == '{' {
			vend = inner.object(b, i, -1, nil)
		} else {
			vend = valueEnd(b, i)
		}
		if vend <= i {
			return -1
		}
		if k >= 0 {
			if s.vals[k] != nil {
				return -1
			}
			s.vals[k] = b[i:vend:vend]
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// index returns the slot of name in s.names, or -1.
func (s *memberScan) index(name []byte) int {
	for k, n := range s.names {
		if n != "" && asciiEqualFold(name, n) {
			return k
		}
	}
	return -1
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just after the JSON string that starts with
// the quote at b[i], or -1 when it does not end.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede
		// it within the string.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
	return -1
}

// valueEnd returns the index just after the JSON value that starts at
// b[i], or -1 when it does not end. Numbers and literals end at the next
// delimiter; their text is left to encoding/json to check.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end := stringEnd(b, i)
				if end < 0 {
					return -1
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
	}
	return len(b)
}

// asciiEqualFold reports whether name equals the lowercase ASCII word
// lower regardless of case, as encoding/json matches an ASCII member name
// to a field.
func asciiEqualFold(name []byte, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
