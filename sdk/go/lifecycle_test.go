package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestWorkerShutdownReleasesUnstartedTasks(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	cancelSeen := make(chan struct{})
	finish := make(chan struct{})
	var calls sync.Map
	w := startWorker(t, s, WorkerConfig{Capacity: 1, ShutdownTimeout: waitTime}, func(ctx context.Context, task *AssignedTask) Outcome {
		calls.Store(task.ID, true)
		<-task.Cancelled
		close(cancelSeen)
		<-finish
		if ctx.Err() == nil {
			return Failed("TEST", "context not cancelled")
		}
		return Succeeded(json.RawMessage(`"done anyway"`))
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	c.assign(idOf("a"), idOf("1"), idOf("b"), 1, `{}`)
	c.assign(idOf("a"), idOf("2"), idOf("d"), 1, `{}`) // no capacity left: waits
	// The worker reads frames in order: once the first handler sees the
	// cancel, the second task has been queued.
	c.send(frameCancel, "", idOf("a"), cancelBody{TaskID: idOf("1"), AttemptID: idOf("b")})
	<-cancelSeen

	stopped := make(chan error, 1)
	go func() { stopped <- w.stop() }()
	release := c.expect(frameRelease)
	want := `{"task_id":"` + idOf("2") + `","attempt_id":"` + idOf("d") + `","epoch":"1","lease_secret":"secret-` + idOf("d") +
		`","reason":"worker shutting down before the task started"}`
	if string(release.Body) != want {
		t.Errorf("release body = %s\nwant %s", release.Body, want)
	}
	c.send(frameAck, release.MessageID, idOf("a"), map[string]any{"task_id": idOf("2"), "attempt_id": idOf("d"), "released": true})

	close(finish)
	complete := c.expect(frameComplete)
	if b := decodeBody(t, complete); string(b["task_id"]) != `"`+idOf("1")+`"` || string(b["outcome"]) != `"succeeded"` {
		t.Errorf("completion = %s", complete.Body)
	}
	c.send(frameAck, complete.MessageID, idOf("a"), completeAck{})
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v", err)
	}
	if code := c.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
	if _, ok := calls.Load(idOf("2")); ok {
		t.Error("the unstarted task was started")
	}
}

func TestWorkerShutdownCancelsHandlersAfterTimeout(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	const timeout = 100 * time.Millisecond
	started := make(chan struct{})
	var cancelledAfter time.Duration
	var stopAt time.Time
	var mu sync.Mutex
	w := startWorker(t, s, WorkerConfig{ShutdownTimeout: timeout}, func(ctx context.Context, task *AssignedTask) Outcome {
		close(started)
		<-ctx.Done()
		mu.Lock()
		cancelledAfter = time.Since(stopAt)
		mu.Unlock()
		select {
		case <-task.Cancelled:
			return Failed("TEST", "Cancelled closed without a task.cancel")
		default:
		}
		return Release("stopped before any effect")
	})
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	c.assign(idOf("a"), testTaskID, idOf("b"), 1, `{}`)
	<-started
	mu.Lock()
	stopAt = time.Now()
	mu.Unlock()
	stopped := make(chan error, 1)
	go func() { stopped <- w.stop() }()
	f := c.expect(frameRelease)
	c.send(frameAck, f.MessageID, idOf("a"), map[string]any{"released": true})
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if cancelledAfter < timeout {
		t.Errorf("handler context cancelled %v after shutdown began, before the %v timeout", cancelledAfter, timeout)
	}
}

func TestWorkerStopsPromptlyWhileDisconnected(t *testing.T) {
	t.Parallel()
	third := make(chan struct{})
	s := setupServer(t, func(n int) (int, string, http.Header) {
		if n == 3 {
			close(third)
		}
		return http.StatusServiceUnavailable, `{"request_id":"` + testReqID + `","error":{"code":"UNAVAILABLE","message":"down"}}`, nil
	})
	w := startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	select {
	case <-third:
	case <-time.After(waitTime):
		t.Fatal("the worker did not retry")
	}
	start := time.Now()
	if err := w.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Run took %v to stop", d)
	}
}

func TestWorkerReconnectsWithBackoff(t *testing.T) {
	t.Parallel()
	const failures = 4
	s := setupServer(t, func(n int) (int, string, http.Header) {
		if n <= failures {
			return http.StatusServiceUnavailable, `{"request_id":"` + testReqID + `","error":{"code":"UNAVAILABLE","message":"server is shutting down"}}`, nil
		}
		return 0, "", nil
	})
	backoff := BackoffConfig{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}
	startWorker(t, s, WorkerConfig{Backoff: backoff}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	times := s.attemptTimes()
	if len(times) != failures+1 {
		t.Fatalf("%d upgrade attempts, want %d", len(times), failures+1)
	}
	// Each delay is random below its cap; allow scheduling slack.
	for i := 1; i < len(times); i++ {
		limit := backoffDelay(backoff, i-1, func(n int64) int64 { return n })
		if gap := times[i].Sub(times[i-1]); gap > limit+time.Second {
			t.Errorf("gap %d = %v, want at most %v", i, gap, limit)
		}
	}
}

func TestWorkerHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	s := setupServer(t, func(n int) (int, string, http.Header) {
		if n == 1 {
			return http.StatusTooManyRequests, `{"request_id":"` + testReqID + `","error":{"code":"CAPACITY_EXCEEDED","message":"too many"}}`,
				http.Header{"Retry-After": {"1"}}
		}
		return 0, "", nil
	})
	startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c := s.accept()
	c.handshake(idOf("a"), longBeat)
	times := s.attemptTimes()
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Errorf("retried after %v, before Retry-After: 1", gap)
	}
}

// TestF2_DefaultBackoffReconnectsWithinSeconds: by default, however many
// attempts failed during an outage, the next one comes within 2 s, so a
// worker or consumer is back at work within a few seconds of the server's
// or its database's return (F-2).
func TestF2_DefaultBackoffReconnectsWithinSeconds(t *testing.T) {
	t.Parallel()
	w, err := NewWorker(WorkerConfig{BaseURL: "http://127.0.0.1:1", Token: testToken, QueueID: testQueueID},
		func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewEventConsumer(EventConsumerConfig{BaseURL: "http://127.0.0.1:1", Token: testToken, SubscriptionID: testSubscriptionID},
		func(context.Context, *Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	top := func(n int64) int64 { return n - 1 }
	for name, cfg := range map[string]BackoffConfig{"Worker": w.cfg.Backoff, "Consumer": c.cfg.Backoff} {
		for _, failures := range []int{1, 5, 10, 1000} {
			if got := backoffDelay(cfg, failures, top); got >= 2*time.Second {
				t.Errorf("%s: delay after %d failures up to %v, want under 2s", name, failures, got)
			}
		}
	}
}

func TestBackoffDelayIsCappedFullJitter(t *testing.T) {
	t.Parallel()
	cfg := BackoffConfig{Initial: 100 * time.Millisecond, Max: time.Second}
	top := func(n int64) int64 { return n - 1 }
	bottom := func(int64) int64 { return 0 }
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for failures, w := range want {
		if got := backoffDelay(cfg, failures, top); got != w*time.Millisecond-1 {
			t.Errorf("largest delay after %d failures = %v, want just under %v", failures, got, w*time.Millisecond)
		}
		if got := backoffDelay(cfg, failures, bottom); got != 0 {
			t.Errorf("smallest delay after %d failures = %v, want 0", failures, got)
		}
	}
	if got := backoffDelay(cfg, 1000, top); got != time.Second-1 {
		t.Errorf("delay after many failures = %v", got)
	}
}

func TestWorkerStopsOnFatalUpgradeError(t *testing.T) {
	t.Parallel()
	s := setupServer(t, func(int) (int, string, http.Header) {
		return http.StatusUnauthorized, `{"request_id":"` + testReqID + `","error":{"code":"UNAUTHENTICATED","message":"unknown token"}}`, nil
	})
	w := startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	err := w.wait()
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Code != CodeUnauthenticated || apiErr.RequestID != testReqID {
		t.Fatalf("Run = %v, want the 401 as an *APIError", err)
	}
	if n := len(s.attemptTimes()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestWorkerStopsOnFatalErrorFrame(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	w := startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c := s.accept()
	hello := c.expect(frameHello)
	c.sendError(hello.MessageID, "", CodeNotFound)
	if err := w.wait(); !IsCode(err, CodeNotFound) {
		t.Fatalf("Run = %v, want NOT_FOUND", err)
	}
}

func TestWorkerRetriesAfterUnavailableErrorFrame(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	startWorker(t, s, WorkerConfig{}, func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c1 := s.accept()
	c1.handshake(idOf("a"), longBeat)
	c1.sendError("", idOf("a"), CodeUnavailable)
	c1.waitClosed()
	c2 := s.accept()
	c2.handshake(idOf("c"), longBeat)
}
