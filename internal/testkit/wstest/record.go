package wstest

import "sync"

// Direction says which side sent a recorded frame.
type Direction string

// Directions of a Record.
const (
	Sent     Direction = "sent"
	Received Direction = "received"
)

// Expectation says what a recorded frame was checked for.
type Expectation string

// Expectations of a Record.
const (
	// Valid frames must match the schema: every received frame, and the
	// frames a test sends with Send or SendFrame.
	Valid Expectation = "valid"
	// Invalid frames are sent with SendInvalid: a test sends them to
	// see the server refuse them, and the schema must refuse them too.
	Invalid Expectation = "invalid"
	// Unchecked frames are sent with SendRaw and are not JSON frames to
	// begin with, or not meant to be checked.
	Unchecked Expectation = "unchecked"
)

// Record is one frame that travelled on a connection.
type Record struct {
	Direction Direction
	// Type is the frame's type, or "" when it is not a JSON envelope.
	Type string
	Raw  []byte
	// Expect is what the frame was checked for.
	Expect Expectation
	// Err is the schema's verdict for a Valid frame (nil: it matched), or
	// non-nil for an Invalid frame that the schema accepted.
	Err error
	// Checked reports that a validator looked at the frame.
	Checked bool
}

// Recorder collects the frames of one or more clients. It is safe for
// concurrent use.
type Recorder struct {
	mu      sync.Mutex
	records []Record
}

func (r *Recorder) add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
}

// Records returns a copy of everything recorded so far, in the order it was
// recorded.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.records...)
}
