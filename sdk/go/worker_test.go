package orbit

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// longBeat is a heartbeat long enough that no ping interferes with a test.
const longBeat = time.Minute

// runningWorker is a worker whose Run executes in the background.
type runningWorker struct {
	t      *testing.T
	cancel context.CancelFunc
	errc   chan error
	once   sync.Once
	err    error
}

// startWorker runs a worker against s with cfg completed by the test
// defaults. The test's cleanup stops it.
func startWorker(t *testing.T, s *fakeServer, cfg WorkerConfig, h TaskHandler) *runningWorker {
	t.Helper()
	cfg.BaseURL, cfg.Token, cfg.QueueID = s.srv.URL, testToken, testQueueID
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = BackoffConfig{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	}
	w, err := NewWorker(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{t: t, cancel: cancel, errc: make(chan error, 1)}
	go func() { rw.errc <- w.Run(ctx) }()
	t.Cleanup(func() { rw.stop() })
	return rw
}

// stop cancels Run's context and returns what Run returned.
func (rw *runningWorker) stop() error {
	rw.cancel()
	return rw.wait()
}

// wait returns what Run returned, without cancelling it.
func (rw *runningWorker) wait() error {
	rw.once.Do(func() {
		select {
		case rw.err = <-rw.errc:
		case <-time.After(2 * waitTime):
			rw.t.Error("Run did not return")
		}
	})
	return rw.err
}

// decodeBody decodes a frame body into a map of raw values.
func decodeBody(t *testing.T, f frame) map[string]json.RawMessage {
	t.Helper()
	return jsonKeys(t, f.Body)
}

func TestWorkerHelloAssignCompleteAndNormalClose(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	tasks := make(chan AssignedTask, 1)
	w := startWorker(t, s, WorkerConfig{Capacity: 2, WorkerName: "w-1"}, func(ctx context.Context, task *AssignedTask) Outcome {
		tasks <- *task
		return Succeeded(json.RawMessage(`{"total":12345678901234567890123}`))
	})
	c := s.accept()

	h := s.header(0)
	if h.Get("Authorization") != "Bearer "+testToken || h.Get("Sec-WebSocket-Protocol") != workerProtocol ||
		h.Get("Sec-WebSocket-Extensions") != "" || h.Get("Cookie") != "" {
		t.Errorf("upgrade headers = %v", h)
	}
	hello := c.handshake(idOf("a"), longBeat)
	if hello.SessionID != "" || hello.ReplyTo != "" || hello.ProtocolVersion != "1" || !validID(hello.MessageID) {
		t.Errorf("hello envelope = %+v", hello)
	}
	if got := string(hello.Body); got != `{"queue_id":"`+testQueueID+`","capacity":2,"worker_name":"w-1"}` {
		t.Errorf("hello body = %s", got)
	}

	c.assign(idOf("a"), testTaskID, idOf("b"), 18446744073709551615, `{"n":123456789012345678901234567890}`)
	var task AssignedTask
	select {
	case task = <-tasks:
	case <-time.After(waitTime):
		t.Fatal("the handler was not called")
	}
	if task.ID != testTaskID || task.QueueID != testQueueID || task.Revision != 2 || task.AttemptID != idOf("b") ||
		task.Epoch != 18446744073709551615 || task.Attempts != 1 || task.MaxAttempts != 3 || task.Idempotent ||
		!task.LeaseUntil.Equal(time.Date(2026, 9, 17, 10, 0, 30, 0, time.UTC)) || task.Cancelled == nil {
		t.Errorf("task = %+v", task)
	}
	if string(task.Input) != `{"n":123456789012345678901234567890}` {
		t.Errorf("input = %s", task.Input)
	}

	complete := c.expect(frameComplete)
	if complete.SessionID != idOf("a") || !validID(complete.MessageID) || complete.MessageID == hello.MessageID {
		t.Errorf("complete envelope = %+v", complete)
	}
	want := `{"task_id":"` + testTaskID + `","attempt_id":"` + idOf("b") + `","epoch":"18446744073709551615",` +
		`"lease_secret":"secret-` + idOf("b") + `","outcome":"succeeded","result":{"total":12345678901234567890123}}`
	if string(complete.Body) != want {
		t.Errorf("complete body = %s\nwant %s", complete.Body, want)
	}
	c.send(frameAck, complete.MessageID, idOf("a"), completeAck{TaskID: testTaskID, AttemptID: idOf("b"),
		Outcome: "succeeded", State: TaskStateSucceeded, Revision: 3})

	if err := w.stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if code := c.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d, want 1000", code)
	}
}

// nestedArrays returns n nested arrays around 0.
func nestedArrays(n int) string {
	return strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
}

func TestWorkerOutcomeBodies(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		outcome Outcome
		typ     string
		body    string // after the proof
	}{
		"Failed":           {Failed("E_CARD", "card declined"), frameComplete, `"outcome":"failed","error":{"code":"E_CARD","message":"card declined"}}`},
		"NeedsReview":      {NeedsReview(json.RawMessage(`[1,2]`)), frameComplete, `"outcome":"needs_review","result":[1,2]}`},
		"Cancelled":        {Cancelled(), frameComplete, `"outcome":"cancelled"}`},
		"SucceededNoValue": {Succeeded(nil), frameComplete, `"outcome":"succeeded"}`},
		"InvalidResult":    {Succeeded(json.RawMessage(`{oops`)), frameComplete, `"outcome":"needs_review"}`},
		"DeepestResult": {Succeeded(json.RawMessage(nestedArrays(maxResultDepth))), frameComplete,
			`"outcome":"succeeded","result":` + nestedArrays(maxResultDepth) + `}`},
		"TooDeepResult": {Succeeded(json.RawMessage(nestedArrays(maxResultDepth + 1))), frameComplete, `"outcome":"needs_review"}`},
		"BracketsInStrings": {Succeeded(json.RawMessage(`["\"` + strings.Repeat("[", 100) + `"]`)), frameComplete,
			`"outcome":"succeeded","result":["\"` + strings.Repeat("[", 100) + `"]}`},
		"Release": {Release("not my kind of task"), frameRelease, `"reason":"not my kind of task"}`},
		"Zero":    {Outcome{}, frameComplete, `"outcome":"failed","error":{"code":"NO_OUTCOME","message":"the task handler returned no outcome"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := setupServer(t, nil)
			startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return tc.outcome })
			c := s.accept()
			c.handshake(idOf("a"), longBeat)
			c.assign(idOf("a"), testTaskID, idOf("b"), 7, `null`)
			f := c.expect(tc.typ)
			want := `{"task_id":"` + testTaskID + `","attempt_id":"` + idOf("b") + `","epoch":"7","lease_secret":"secret-` + idOf("b") + `",` + tc.body
			if string(f.Body) != want {
				t.Errorf("body = %s\nwant %s", f.Body, want)
			}
			if tc.typ == frameRelease {
				c.send(frameAck, f.MessageID, idOf("a"), map[string]any{"task_id": testTaskID, "attempt_id": idOf("b"), "released": true})
			} else {
				c.send(frameAck, f.MessageID, idOf("a"), completeAck{TaskID: testTaskID, AttemptID: idOf("b")})
			}
		})
	}
}

func TestWorkerResendsCompletionAfterReconnect(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	w := startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome {
		return Failed("E_X", "boom")
	})
	c1 := s.accept()
	c1.handshake(idOf("a"), longBeat)
	c1.assign(idOf("a"), testTaskID, idOf("b"), 4, `{}`)
	first := c1.expect(frameComplete)
	c1.drop() // the ack is lost with the connection

	c2 := s.accept()
	c2.handshake(idOf("c"), longBeat)
	again := c2.expect(frameComplete)
	if string(again.Body) != string(first.Body) {
		t.Errorf("re-sent body = %s, want the same proof and outcome %s", again.Body, first.Body)
	}
	if again.SessionID != idOf("c") || again.MessageID == first.MessageID {
		t.Errorf("re-sent envelope = %+v", again)
	}
	c2.send(frameAck, again.MessageID, idOf("c"), completeAck{TaskID: testTaskID, AttemptID: idOf("b"),
		Outcome: "failed", State: TaskStateFailed, Revision: 3, Deduplicated: true})
	if err := w.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	if code := c2.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
}

func TestWorkerDropsCompletionOnLeaseLostAndKeepsConnection(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome {
		return Succeeded(nil)
	})
	c1 := s.accept()
	c1.handshake(idOf("a"), longBeat)
	c1.assign(idOf("a"), testTaskID, idOf("b"), 1, `{}`)
	lost := c1.expect(frameComplete)
	c1.sendError(lost.MessageID, idOf("a"), CodeTaskLeaseLost)

	// The connection is still in use.
	c1.assign(idOf("a"), idOf("7"), idOf("8"), 1, `{}`)
	second := c1.expect(frameComplete)
	if decodeBody(t, second)["task_id"] == nil || string(decodeBody(t, second)["attempt_id"]) != `"`+idOf("8")+`"` {
		t.Fatalf("second completion = %s", second.Body)
	}
	c1.send(frameAck, second.MessageID, idOf("a"), completeAck{})
	c1.drop()

	// After reconnecting, nothing is re-sent: the first ping comes first.
	c2 := s.accept()
	c2.handshake(idOf("c"), 20*time.Millisecond)
	if f := c2.nextAny(); f.Type != framePing {
		t.Errorf("first frame after reconnecting = %s %s, want worker.ping", f.Type, f.Body)
	}
}

func TestWorkerHeartbeat(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c := s.accept()
	c.handshake(idOf("a"), 10*time.Millisecond)
	for range 3 {
		f := c.nextAny()
		if f.Type != framePing || f.SessionID != idOf("a") || string(f.Body) != `{}` || !validID(f.MessageID) {
			t.Fatalf("frame = %+v body %s, want a worker.ping", f, f.Body)
		}
		c.send(frameAck, f.MessageID, idOf("a"), map[string]string{"server_time": "2026-09-17T10:00:00Z"})
	}
}

func TestWorkerCancelClosesCancelledAndContext(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	started := make(chan struct{})
	startWorker(t, s, WorkerConfig{}, func(ctx context.Context, task *AssignedTask) Outcome {
		close(started)
		<-task.Cancelled
		if ctx.Err() == nil {
			return Failed("TEST", "context not cancelled with Cancelled")
		}
		return Cancelled()
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	c.assign(idOf("a"), testTaskID, idOf("b"), 1, `{}`)
	<-started
	c.send(frameCancel, "", idOf("a"), cancelBody{TaskID: testTaskID, AttemptID: idOf("b")})
	f := c.expect(frameComplete)
	if got := string(decodeBody(t, f)["outcome"]); got != `"cancelled"` {
		t.Errorf("outcome = %s (body %s)", got, f.Body)
	}
	c.send(frameAck, f.MessageID, idOf("a"), completeAck{})
}

func TestWorkerRunsUpToCapacityHandlers(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	const capacity = 3
	var mu sync.Mutex
	active, peak := 0, 0
	gate := make(chan struct{})
	arrived := make(chan struct{}, 8)
	startWorker(t, s, WorkerConfig{Capacity: capacity}, func(context.Context, *AssignedTask) Outcome {
		mu.Lock()
		active++
		peak = max(peak, active)
		mu.Unlock()
		arrived <- struct{}{}
		<-gate
		mu.Lock()
		active--
		mu.Unlock()
		return Succeeded(nil)
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	ids := []string{"1", "2", "3", "4", "5"}
	for _, id := range ids {
		c.assign(idOf("a"), idOf(id), idOf(id + "0")[:32], 1, `{}`)
	}
	for range capacity {
		<-arrived
	}
	close(gate)
	for range ids {
		f := c.expect(frameComplete)
		c.send(frameAck, f.MessageID, idOf("a"), completeAck{})
	}
	mu.Lock()
	defer mu.Unlock()
	if peak != capacity {
		t.Errorf("peak concurrency = %d, want %d", peak, capacity)
	}
}

func TestNewWorkerChecksConfig(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) }
	base := WorkerConfig{BaseURL: "https://orbit.example.com/base/", Token: testToken, QueueID: testQueueID}
	w, err := NewWorker(base, ok)
	if err != nil {
		t.Fatal(err)
	}
	if w.url != "wss://orbit.example.com/base/v1/workers/connect" || w.cfg.Capacity != 1 ||
		w.cfg.ShutdownTimeout != DefaultShutdownTimeout || w.cfg.Backoff.Initial != DefaultBackoffInitial {
		t.Errorf("worker = %q %+v", w.url, w.cfg)
	}
	if w.dialer.EnableCompression || len(w.dialer.Subprotocols) != 1 || w.dialer.Subprotocols[0] != workerProtocol {
		t.Errorf("dialer = %+v", w.dialer)
	}
	plain := base
	plain.BaseURL = "http://127.0.0.1:8080"
	if w, err := NewWorker(plain, ok); err != nil || w.url != "ws://127.0.0.1:8080/v1/workers/connect" {
		t.Errorf("url = %v, %v", w, err)
	}
	for name, mutate := range map[string]func(*WorkerConfig){
		"TokenInURL":   func(c *WorkerConfig) { c.BaseURL = "https://orbit.example.com/?token=" + testToken },
		"NoToken":      func(c *WorkerConfig) { c.Token = "" },
		"NoQueue":      func(c *WorkerConfig) { c.QueueID = "" },
		"TooMany":      func(c *WorkerConfig) { c.Capacity = MaxWorkerCapacity + 1 },
		"Negative":     func(c *WorkerConfig) { c.Capacity = -1 },
		"NegativeTime": func(c *WorkerConfig) { c.ShutdownTimeout = -time.Second },
	} {
		cfg := base
		mutate(&cfg)
		if _, err := NewWorker(cfg, ok); err == nil {
			t.Errorf("%s: NewWorker accepted the config", name)
		}
	}
	if _, err := NewWorker(base, nil); err == nil {
		t.Error("NewWorker accepted a nil handler")
	}
}

func TestWorkerReleasesQueuedTaskOnCancel(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	gate := make(chan struct{})
	startWorker(t, s, WorkerConfig{Capacity: 1}, func(ctx context.Context, task *AssignedTask) Outcome {
		<-gate
		return Succeeded(nil)
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	c.assign(idOf("a"), idOf("1"), idOf("b"), 1, `{}`)
	c.assign(idOf("a"), idOf("2"), idOf("d"), 1, `{}`)
	c.send(frameCancel, "", idOf("a"), cancelBody{TaskID: idOf("2"), AttemptID: idOf("d")})
	f := c.expect(frameRelease)
	if b := decodeBody(t, f); string(b["attempt_id"]) != `"`+idOf("d")+`"` || string(b["reason"]) != `"cancel requested before the task started"` {
		t.Errorf("release = %s", f.Body)
	}
	c.send(frameAck, f.MessageID, idOf("a"), map[string]any{"released": true})
	close(gate)
	f = c.expect(frameComplete)
	c.send(frameAck, f.MessageID, idOf("a"), completeAck{})
}

func TestWorkerReleasesQueuedTasksAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	gate := make(chan struct{})
	startWorker(t, s, WorkerConfig{Capacity: 1}, func(ctx context.Context, task *AssignedTask) Outcome {
		<-gate
		return Succeeded(nil)
	})
	c1 := s.accept()
	c1.handshake(idOf("a"), longBeat)
	c1.assign(idOf("a"), idOf("1"), idOf("b"), 1, `{}`)
	c1.assign(idOf("a"), idOf("2"), idOf("d"), 1, `{}`)
	c1.drop()

	c2 := s.accept()
	c2.handshake(idOf("c"), longBeat)
	f := c2.expect(frameRelease)
	if b := decodeBody(t, f); string(b["attempt_id"]) != `"`+idOf("d")+`"` || string(b["reason"]) != `"connection lost before the task started"` {
		t.Errorf("release = %s", f.Body)
	}
	c2.send(frameAck, f.MessageID, idOf("c"), map[string]any{"released": true})
	close(gate)
	f = c2.expect(frameComplete) // the running task's outcome goes on the new connection
	if b := decodeBody(t, f); string(b["attempt_id"]) != `"`+idOf("b")+`"` || f.SessionID != idOf("c") {
		t.Errorf("completion = %+v %s", f, f.Body)
	}
	c2.send(frameAck, f.MessageID, idOf("c"), completeAck{})
}

func TestWorkerReportsPanicAsFailure(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	var calls sync.Map
	startWorker(t, s, WorkerConfig{}, func(ctx context.Context, task *AssignedTask) Outcome {
		if _, seen := calls.LoadOrStore(task.AttemptID, true); seen {
			return Failed("TEST", "ran twice")
		}
		panic("handler bug")
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	c.assign(idOf("a"), testTaskID, idOf("b"), 1, `{}`)
	c.assign(idOf("a"), testTaskID, idOf("b"), 1, `{}`) // a repeated assignment runs once
	f := c.expect(frameComplete)
	if b := decodeBody(t, f); string(b["outcome"]) != `"failed"` || string(b["error"]) != `{"code":"HANDLER_PANIC","message":"the task handler panicked"}` {
		t.Errorf("completion = %s", f.Body)
	}
	c.send(frameAck, f.MessageID, idOf("a"), completeAck{})
}

func TestTruncateCutsAtRunes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"abc", 5, "abc"}, {"abc", 3, "abc"}, {"abcd", 3, "abc"}, {"héllo", 2, "hé"}, {"", 0, ""}, {"x", 0, ""}} {
		if got := truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
