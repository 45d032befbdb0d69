package authz_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// sessionFrame is a request frame of a welcomed session that names a
// resource: the matrix sends it with the owner's resource from a session
// of another credential on its own subscription or queue.
type sessionFrame struct {
	entry, helloType string
	frameType        string
	// code answers the frame for a resource the session may not touch:
	// NOT_FOUND for a delivery outside its subscription (E-15), and
	// TASK_LEASE_LOST for a task proof that is not the task's current
	// lease (T-5), whether or not the task exists.
	code string
	// body builds the frame's body naming resource id (a delivery or a
	// task) with a lease secret that is not its lease's.
	body func(id string) map[string]any
}

// sessionFrames are the frames of both protocols that act on a delivery or
// a task by its ID.
var sessionFrames = []sessionFrame{
	{entry: "events", helloType: "events.hello", frameType: "event.ack", code: "NOT_FOUND", body: func(id string) map[string]any {
		return map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": leaseSecret()}
	}},
	{entry: "events", helloType: "events.hello", frameType: "event.extend", code: "NOT_FOUND", body: func(id string) map[string]any {
		return map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": leaseSecret(), "extend_ms": 1000}
	}},
	{entry: "events", helloType: "events.hello", frameType: "event.nack", code: "NOT_FOUND", body: func(id string) map[string]any {
		return map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": leaseSecret(), "delay_ms": 0, "reason": "authz probe"}
	}},
	{entry: "events", helloType: "events.hello", frameType: "event.reject", code: "NOT_FOUND", body: func(id string) map[string]any {
		return map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": leaseSecret(), "reason": "authz probe"}
	}},
	{entry: "workers", helloType: "worker.hello", frameType: "task.complete", code: "TASK_LEASE_LOST", body: func(id string) map[string]any {
		return map[string]any{"task_id": id, "attempt_id": randomTarget().Task, "epoch": "1", "lease_secret": leaseSecret(), "outcome": "succeeded"}
	}},
	{entry: "workers", helloType: "worker.hello", frameType: "task.release", code: "TASK_LEASE_LOST", body: func(id string) map[string]any {
		return map[string]any{"task_id": id, "attempt_id": randomTarget().Task, "epoch": "1", "lease_secret": leaseSecret(), "reason": "authz probe"}
	}},
}

// checkSessionFrames sends every session frame naming the owner's delivery
// or task from a welcomed session of each caller on its own subscription
// or queue, and checks that the error reads exactly like the one for a
// resource that does not exist, and carries nothing of the owner's. A
// caller's session is past every check of the entry; what stops it is that
// the resource is not its subscription's or its queue's.
func (m *matrix) checkSessionFrames(t *testing.T, callers []*caller) {
	for _, f := range sessionFrames {
		t.Run(f.frameType, func(t *testing.T) {
			real, what := m.owner.real.Delivery, "delivery"
			if f.entry == "workers" {
				real, what = m.owner.real.Task, "task"
			}
			asked := 0
			for _, c := range callers {
				hello := map[string]any{"subscription_id": c.own.Subscription, "capacity": 1}
				if f.entry == "workers" {
					// A session on the owner's queue could hold the
					// owner's task: only callers with a queue of
					// their own ask.
					if c.own.Queue == m.owner.real.Queue {
						continue
					}
					hello = map[string]any{"queue_id": c.own.Queue, "capacity": 1}
				}
				if c.own.Queue == "" {
					continue
				}
				asked++
				missing := m.sessionAnswer(t, c, f, hello, randomTarget().Delivery)
				got := m.sessionAnswer(t, c, f, hello, real)
				if got.code != f.code || got.code != missing.code || got.message != missing.message {
					t.Errorf("%s naming the owner's %s: %s; want %s, the answer for one that does not exist: %s",
						f.frameType, what, got.raw, f.code, missing.raw)
				}
				m.noLeak(t, f.frameType, got, c)
			}
			if asked == 0 {
				t.Fatal("no caller could open a session of its own")
			}
		})
	}
}

// sessionAnswer opens a session of c with hello, sends f naming id and
// returns the answer to it.
func (m *matrix) sessionAnswer(t *testing.T, c *caller, f sessionFrame, hello map[string]any, id string) answer {
	t.Helper()
	url := "ws" + strings.TrimPrefix(m.srv.URL, "http") + "/v1/" + f.entry + "/connect"
	client := wstest.Dial(t, wstest.Options{URL: url, Subprotocol: "orbit." + f.entry + ".v1", Timeout: waitTime,
		Header: http.Header{"Authorization": c.auth}})
	defer client.Close()
	h := client.NewFrame(f.helloType, hello)
	client.SendFrame(h)
	welcome := client.Reply(h.MessageID)
	if welcome.Error != nil || welcome.SessionID == "" {
		t.Fatalf("%s hello of the caller's own resource: %s", f.entry, welcome)
	}
	client.SetSession(welcome.SessionID)
	req := client.NewFrame(f.frameType, f.body(id))
	client.SendFrame(req)
	reply := client.Reply(req.MessageID)
	a := answer{raw: reply.Raw, sessionID: reply.SessionID}
	if reply.Error != nil {
		a.code, a.message = reply.Error.Code, reply.Error.Message
	}
	return a
}

// leaseSecret returns a well-formed lease secret that is nobody's.
func leaseSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
