package orbit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer collects a worker's log for inspection; it is safe for
// concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// welcomeResumed answers hello with a welcome of sessionID that reports
// resumed as adopted.
func (c *fakeConn) welcomeResumed(hello frame, sessionID string, capacity int, resumed []string) {
	c.t.Helper()
	c.send(frameWelcome, hello.MessageID, sessionID, welcomeBody{
		SessionID: sessionID, QueueID: testQueueID, Capacity: capacity, LeaseDurationMS: 30000,
		HeartbeatIntervalMS: longBeat.Milliseconds(), ServerTime: time.Now().UTC(), Resumed: resumed,
	})
}

// wantNoResume checks that hello carries no resume member.
func wantNoResume(t *testing.T, hello frame) {
	t.Helper()
	if _, ok := decodeBody(t, hello)["resume"]; ok {
		t.Errorf("hello body = %s, want no resume", hello.Body)
	}
}

func TestWorkerResumesRunningLeasesAfterReconnect(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	logs := &logBuffer{}
	gate := make(chan struct{})
	started := make(chan string, 4)
	var calls sync.Map
	startWorker(t, s, WorkerConfig{Capacity: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		func(ctx context.Context, task *AssignedTask) Outcome {
			if _, seen := calls.LoadOrStore(task.AttemptID, true); seen {
				return Failed("TEST", "ran twice")
			}
			started <- task.AttemptID
			<-gate
			return Succeeded(nil)
		})

	// The first connection resumes nothing.
	c1 := s.accept()
	wantNoResume(t, c1.handshake(idOf("a"), longBeat))
	// Two tasks run, a third waits for a free slot.
	c1.assign(idOf("a"), idOf("1"), idOf("e"), 3, `{}`)
	c1.assign(idOf("a"), idOf("2"), idOf("b"), 18446744073709551615, `{}`)
	c1.assign(idOf("a"), idOf("3"), idOf("d"), 1, `{}`)
	for range 2 {
		select {
		case <-started:
		case <-time.After(waitTime):
			t.Fatal("the handlers did not start")
		}
	}
	c1.drop()

	// The next hello carries the proofs of the running attempts, ordered
	// by attempt id, exactly as they were assigned; not the waiting one.
	c2 := s.accept()
	hello := c2.expect(frameHello)
	want := `{"queue_id":"` + testQueueID + `","capacity":2,"resume":[` +
		`{"task_id":"` + idOf("2") + `","attempt_id":"` + idOf("b") + `","epoch":"18446744073709551615","lease_secret":"secret-` + idOf("b") + `"},` +
		`{"task_id":"` + idOf("1") + `","attempt_id":"` + idOf("e") + `","epoch":"3","lease_secret":"secret-` + idOf("e") + `"}]}`
	if string(hello.Body) != want {
		t.Errorf("hello body = %s\nwant %s", hello.Body, want)
	}
	if hello.SessionID != "" || hello.ReplyTo != "" {
		t.Errorf("hello envelope = %+v", hello)
	}
	// The server adopts one lease; the other was lost meanwhile.
	c2.welcomeResumed(hello, idOf("c"), 2, []string{idOf("e")})

	// The waiting task, whose lease was not renewed, is released.
	f := c2.expect(frameRelease)
	if b := decodeBody(t, f); string(b["attempt_id"]) != `"`+idOf("d")+`"` {
		t.Errorf("release = %s", f.Body)
	}
	c2.send(frameAck, f.MessageID, idOf("c"), map[string]any{"task_id": idOf("3"), "attempt_id": idOf("d"), "released": true})

	deadline := time.Now().Add(waitTime)
	for !strings.Contains(logs.String(), "did not resume the lease") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the lease that was not resumed; log:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if log := logs.String(); !strings.Contains(log, idOf("b")) || strings.Contains(log, "lease_secret") || strings.Contains(log, "secret-") {
		t.Errorf("log = %s, want a warning naming attempt %s and no secret", log, idOf("b"))
	}

	// Both handlers finish; their outcomes go on the new connection. The
	// one whose lease was lost is refused, which settles it.
	close(gate)
	outcomes := map[string]frame{}
	for range 2 {
		f := c2.expect(frameComplete)
		var attempt string
		if err := json.Unmarshal(decodeBody(t, f)["attempt_id"], &attempt); err != nil {
			t.Fatal(err)
		}
		outcomes[attempt] = f
	}
	lost, kept := outcomes[idOf("b")], outcomes[idOf("e")]
	if lost.Type == "" || kept.Type == "" {
		t.Fatalf("completions for %v, want attempts b and e", outcomes)
	}
	c2.sendError(lost.MessageID, idOf("c"), CodeTaskLeaseLost)
	c2.send(frameAck, kept.MessageID, idOf("c"), completeAck{TaskID: idOf("1"), AttemptID: idOf("e"), Outcome: "succeeded", State: TaskStateSucceeded, Revision: 3})

	// Nothing runs any more: a later reconnect resumes nothing.
	c2.drop()
	c3 := s.accept()
	hello = c3.expect(frameHello)
	wantNoResume(t, hello)
	c3.welcomeResumed(hello, idOf("f"), 2, []string{})
	c3.assign(idOf("f"), idOf("4"), idOf("9"), 1, `{}`)
	for {
		// An outcome whose answer the drop may have overtaken is re-sent
		// first.
		f := c3.expect(frameComplete)
		c3.send(frameAck, f.MessageID, idOf("f"), completeAck{})
		if b := decodeBody(t, f); string(b["attempt_id"]) == `"`+idOf("9")+`"` {
			break
		}
	}
}
