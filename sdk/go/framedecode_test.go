package orbit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// deliverMessage is an event.deliver message as the server writes it,
// with the seed's example body and, if resultBytes > 0, a snapshot result
// of about that many bytes.
func deliverMessage(tb testing.TB, resultBytes int) []byte {
	tb.Helper()
	body := deliverJSON(idOf("3"), 7, testEventID, testSecret)
	if resultBytes > 0 {
		body = strings.Replace(body, `{"total": 12345678901234567890123}`, bulkyResult(resultBytes), 1)
	}
	b, err := json.Marshal(frame{ProtocolVersion: protocolVersion, Type: frameEventDeliver, MessageID: newMessageID(),
		SessionID: idOf("4"), Body: json.RawMessage(body)})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// assignMessage is a task.assign message as the server writes it, with an
// input of about inputBytes bytes ({} if 0).
func assignMessage(tb testing.TB, inputBytes int) []byte {
	tb.Helper()
	var a assignBody
	a.Task.ID, a.Task.QueueID, a.Task.Revision = testTaskID, testQueueID, 2
	a.Task.Input, a.Task.Attempts, a.Task.MaxAttempts = json.RawMessage(`{}`), 1, 3
	if inputBytes > 0 {
		a.Task.Input = json.RawMessage(bulkyResult(inputBytes))
	}
	a.AttemptID, a.Epoch, a.LeaseUntil, a.LeaseSecret = idOf("b"), 7, time.Date(2026, 9, 17, 10, 0, 30, 0, time.UTC), testSecret
	a.Trace = &traceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	f, err := newFrame(frameAssign, idOf("4"), a)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// bulkyResult is a JSON object of about n bytes: lines of an order, with
// strings that need escapes.
func bulkyResult(n int) string {
	var b strings.Builder
	b.WriteString(`{"order":"o-1","lines":[`)
	for i := 0; b.Len() < n-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%06d","qty":%d,"price":"%d.99","note":"line \"%d\"\n","gift":%t}`, i, i%7+1, i*3, i, i%2 == 0)
	}
	b.WriteString(`],"total":12345678901234567890123}`)
	return b.String()
}

// BenchmarkDecodeDeliverFrame measures what an event connection's reader
// does with one event.deliver message: decode it and queue the delivery.
func BenchmarkDecodeDeliverFrame(b *testing.B) {
	for _, bc := range []struct {
		name   string
		result int
	}{{"seed", 0}, {"result4KiB", 4 << 10}} {
		b.Run(bc.name, func(b *testing.B) {
			msg := deliverMessage(b, bc.result)
			c := newBenchEventConn()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.handleMessage(msg); err != nil {
					b.Fatal(err)
				}
				c.queue = c.queue[:0]
			}
		})
	}
}

// ackMessage is the ack to the event.ack with message id replyTo, as the
// server writes it.
func ackMessage(tb testing.TB, replyTo string) []byte {
	tb.Helper()
	f, err := newFrame(frameAck, idOf("4"), AckResult{DeliveryID: idOf("3"), EventID: testEventID, Epoch: 7,
		AcknowledgedAt: time.Date(2026, 9, 17, 10, 0, 1, 0, time.UTC)})
	if err != nil {
		tb.Fatal(err)
	}
	f.ReplyTo = replyTo
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// newBenchEventConn returns an event connection without a WebSocket, for
// handleMessage.
func newBenchEventConn() *EventConn {
	return &EventConn{pending: make(map[string]*pendingReply), arrived: make(chan struct{})}
}

// await registers a request of type typ with message id, as send does.
func await(c *EventConn, typ, id string) *pendingReply {
	r := &pendingReply{c: c, typ: typ, id: id, ch: make(chan frame, 1)}
	c.mu.Lock()
	c.pending[id] = r
	c.mu.Unlock()
	return r
}

// BenchmarkDecodeAckFrame measures what an event connection does with the
// ack to one of its event.ack requests: decode it in the reader, pass it
// to the request and decode the answer there.
func BenchmarkDecodeAckFrame(b *testing.B) {
	id := newMessageID()
	msg := ackMessage(b, id)
	c := newBenchEventConn()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		r := await(c, frameEventAck, id)
		if err := c.handleMessage(msg); err != nil {
			b.Fatal(err)
		}
		if res, err := decodeAck(<-r.ch); err != nil || res.Epoch != 7 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkDecodeLeaseFrame measures what a worker does with one
// task.assign message until it holds the lease: decode the envelope in the
// session's reader and the body in the run loop.
func BenchmarkDecodeLeaseFrame(b *testing.B) {
	for _, bc := range []struct {
		name  string
		input int
	}{{"small", 0}, {"input4KiB", 4 << 10}} {
		b.Run(bc.name, func(b *testing.B) {
			msg := assignMessage(b, bc.input)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				f, err := parseWorkerFrame(msg)
				if err != nil {
					b.Fatal(err)
				}
				if a, err := assignOf(f); err != nil || a.AttemptID == "" {
					b.Fatal(a.AttemptID, err)
				}
			}
		})
	}
}

// checkDecodeOnce fails t when the one-pass decoding of message b differs
// from the general path's: whatever decodeEventsOnce or decodeAssignOnce
// accept, the general path must accept with the same result. Every reply
// is taken for the ack to an event.ack.
func checkDecodeOnce(t *testing.T, b []byte) (deliverOnce, ackOnce, assignOnce bool) {
	t.Helper()
	if d, f, ok := decodeEventsOnce(b, func(string) bool { return true }); ok {
		g, err := parseFrame(b)
		if err != nil {
			t.Fatalf("one pass took %q; the general path: %v", b, err)
		}
		if d != nil {
			deliverOnce = true
			if g.ReplyTo != "" || g.Type != frameEventDeliver {
				t.Fatalf("one pass took %q as a delivery; the general path: frame %+v", b, g)
			}
			want, err := decodeDeliver(g.Body)
			if err != nil {
				t.Fatalf("one pass took %q as a delivery; the general path: %v", b, err)
			}
			if !reflect.DeepEqual(d, want) {
				t.Fatalf("one pass of %q = %+v, the general path %+v", b, d, want)
			}
		} else {
			ackOnce = true
			if g.ReplyTo == "" || g.Type != frameAck {
				t.Fatalf("one pass took %q as an ack; the general path: frame %+v", b, g)
			}
			want, err := decodeAck(g)
			if err != nil {
				t.Fatalf("one pass took %q as an ack; the general path: %v", b, err)
			}
			got, _ := decodeAck(f)
			f.ack = nil
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(f, g) {
				t.Fatalf("one pass of %q = %+v %+v, the general path %+v %+v", b, f, got, g, want)
			}
		}
	}
	if f, ok := decodeAssignOnce(b); ok {
		assignOnce = true
		g, err := parseFrame(b)
		if err != nil || g.Type != frameAssign {
			t.Fatalf("one pass took %q as a task.assign; the general path: frame %+v, %v", b, g, err)
		}
		want, err := assignOf(g)
		if err != nil {
			t.Fatalf("one pass took %q as a task.assign; the general path: %v", b, err)
		}
		got := f
		got.assign = nil
		if !reflect.DeepEqual(*f.assign, want) || !reflect.DeepEqual(got, g) {
			t.Fatalf("one pass of %q = %+v %+v, the general path %+v %+v", b, got, *f.assign, g, want)
		}
	}
	return deliverOnce, ackOnce, assignOnce
}

// unusualFrames are messages that the general path reads in a way a
// single decode into the body's type would not: the one-pass path must
// leave them to it.
var unusualFrames = []string{
	// A member given twice: the general path keeps the last body or event
	// whole, one decode would merge them.
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"lease_secret":"s"},"body":{"delivery":{"id":"d"},"event":{}}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{"id":"a"},"EVENT":{"type":"t"},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"task.assign","message_id":"m","body":{"attempt_id":"a"},"Body":{"task":{"id":"t"}}}`,
	`{"protocol_version":"1","type":"event.deliver","type":"ack","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	// No body, a null body, no event.
	`{"protocol_version":"1","type":"event.deliver","message_id":"m"}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":null}`,
	`{"protocol_version":"1","type":"task.assign","message_id":"m","body":null}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"lease_secret":"s"}}`,
	// Names with escapes or non-ASCII bytes, which encoding/json may fold
	// onto a field.
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","b\u006fdy":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"},"ſ":1}`,
	`{"protocol_version":"1","type":"event.d\u0065liver","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	// A reply, another version, a wrong type, a missing proof.
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","reply_to":"r","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	`{"protocol_version":"2","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{"sequence":13},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":[],"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":5,"body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":""},"event":{},"lease_secret":"s"}}`,
	`{"protocol_version":"1","type":"task.assign","message_id":"m","body":{"task":{"revision":2},"attempt_id":"a"}}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","body":{"epoch":7}}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","reply_to":"r","body":{"epoch":7}}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","reply_to":"r\u0031","body":{"epoch":"7"}}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","reply_to":"r","body":null}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","reply_to":"r"}`,
	`{"protocol_version":"1","type":"ack","message_id":"m","reply_to":"r","reply_to":"q","body":{}}`,
	// Not JSON.
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}} x`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{},"lease_secret":"s"}`,
	`{"protocol_version":"1","type":"event.deliver","message_id":"m","body":{"delivery":{"id":"d"},"event":{"id":"\"},"lease_secret":"s"}}`,
}

// TestC18_ServerFramesDecodeInOnePass checks that event.deliver, the ack
// to event.ack and task.assign as the server writes them, compact or indented, take the
// one-pass path with the general path's result.
func TestC18_ServerFramesDecodeInOnePass(t *testing.T) {
	t.Parallel()
	deliver, assign := deliverMessage(t, 4<<10), assignMessage(t, 4<<10)
	var indented bytes.Buffer
	if err := json.Indent(&indented, deliver, "", "  "); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{deliverMessage(t, 0), deliver, indented.Bytes()} {
		if d, _, _ := checkDecodeOnce(t, b); !d {
			t.Errorf("event.deliver %s took the general path", b)
		}
	}
	if _, a, _ := checkDecodeOnce(t, ackMessage(t, newMessageID())); !a {
		t.Error("the ack to an event.ack took the general path")
	}
	for _, b := range [][]byte{assignMessage(t, 0), assign} {
		if _, _, a := checkDecodeOnce(t, b); !a {
			t.Errorf("task.assign %s took the general path", b)
		}
	}
}

// TestC18_UnusualFramesTakeTheGeneralPath checks that the messages a
// single decode could read differently are left to the general path.
func TestC18_UnusualFramesTakeTheGeneralPath(t *testing.T) {
	t.Parallel()
	for _, s := range unusualFrames {
		if d, ack, a := checkDecodeOnce(t, []byte(s)); d || ack || a {
			t.Errorf("%s took the one-pass path", s)
		}
	}
}

// FuzzDecodeOnceMatchesGeneralPath checks that whatever message the
// one-pass path accepts, the general path accepts with the same result.
func FuzzDecodeOnceMatchesGeneralPath(f *testing.F) {
	f.Add(deliverMessage(f, 0))
	f.Add(deliverMessage(f, 512))
	f.Add(ackMessage(f, idOf("1")))
	f.Add(assignMessage(f, 0))
	f.Add(assignMessage(f, 512))
	for _, s := range unusualFrames {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeOnce(t, b)
	})
}
