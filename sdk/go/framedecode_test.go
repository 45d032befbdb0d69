package orbit

import (
	"encoding/json"
	"fmt"
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
			c := &EventConn{pending: make(map[string]chan frame), arrived: make(chan struct{})}
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
