package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// runningConsumer is a consumer whose Run executes in the background.
type runningConsumer struct {
	t      *testing.T
	c      *EventConsumer
	cancel context.CancelFunc
	errc   chan error
	once   sync.Once
	err    error
}

// startConsumer runs a consumer against s with cfg completed by the test
// defaults. The test's cleanup stops it.
func startConsumer(t *testing.T, s *fakeServer, cfg EventConsumerConfig, h EventHandler) *runningConsumer {
	t.Helper()
	cfg.BaseURL, cfg.Token = s.srv.URL, testToken
	if cfg.SubscriptionID == "" {
		cfg.SubscriptionID = testSubscriptionID
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = BackoffConfig{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	}
	if cfg.ShutdownTimeout == 0 {
		// Tests that leave an acknowledgement unanswered end quickly.
		cfg.ShutdownTimeout = 200 * time.Millisecond
	}
	c, err := NewEventConsumer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{t: t, c: c, cancel: cancel, errc: make(chan error, 1)}
	go func() { rc.errc <- c.Run(ctx) }()
	t.Cleanup(func() { rc.stop() })
	return rc
}

// stop cancels Run's context and returns what Run returned.
func (rc *runningConsumer) stop() error {
	rc.cancel()
	return rc.wait()
}

// wait returns what Run returned, without cancelling it.
func (rc *runningConsumer) wait() error {
	rc.once.Do(func() {
		select {
		case rc.err = <-rc.errc:
		case <-time.After(2 * waitTime):
			rc.t.Error("Run did not return")
		}
	})
	return rc.err
}

// ackingHandler returns a handler that reports each delivery on the
// returned channel and succeeds.
func ackingHandler() (EventHandler, chan *Delivery) {
	ch := make(chan *Delivery, 16)
	return func(_ context.Context, d *Delivery) error {
		ch <- d
		return nil
	}, ch
}

// receive returns the next delivery reported on ch.
func receive(t *testing.T, ch chan *Delivery) *Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(waitTime):
		t.Fatal("the handler was not called")
		return nil
	}
}

// waitFor polls cond until it holds, for counters the consumer updates
// after the frame a test could wait for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTime)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConsumerAcksWhenHandlerSucceeds(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{Capacity: 3}, h)
	fc := s.accept()
	session := idOf("4")
	hello := fc.welcomeEvents(session, longBeat)
	if want := `{"subscription_id":"` + testSubscriptionID + `","capacity":3}`; string(hello.Body) != want {
		t.Errorf("hello body = %s, want %s", hello.Body, want)
	}
	fc.deliver(session, idOf("3"), 2, testEventID)
	d := receive(t, got)
	if d.ID != idOf("3") || d.Event.ID != testEventID || d.Proof.Epoch != 2 {
		t.Errorf("delivery = %+v", d)
	}
	ack := fc.expect(frameEventAck)
	if ack.SessionID != session || string(ack.Body) != ackJSON(idOf("3"), 2) {
		t.Errorf("event.ack = %+v %s", ack, ack.Body)
	}
	fc.ackReply(ack, session, false)
	waitFor(t, "acknowledged", func() bool { return rc.c.Stats().Acked == 1 })
	if st := rc.c.Stats(); st != (ConsumerStats{Delivered: 1, Acked: 1}) {
		t.Errorf("stats = %+v", st)
	}
	if err := rc.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	if code := fc.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
}

func TestConsumerHandlerErrorMeansNoAck(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	calls := make(chan string, 4)
	rc := startConsumer(t, s, EventConsumerConfig{}, func(_ context.Context, d *Delivery) error {
		calls <- d.ID
		switch d.ID {
		case idOf("1"):
			return errors.New("inbox unavailable")
		case idOf("2"):
			panic("handler bug")
		}
		return nil
	})
	fc := s.accept()
	session := idOf("4")
	fc.welcomeEvents(session, longBeat)
	// Capacity 1: each delivery runs after the previous handler returned.
	// The failed and the panicked handler's deliveries are NACKed (K-15),
	// so the first acknowledgement is the third delivery's.
	fc.deliver(session, idOf("1"), 1, testEventID)
	fc.deliver(session, idOf("2"), 1, testEventID)
	fc.deliver(session, idOf("3"), 1, testEventID)
	for _, id := range []string{idOf("1"), idOf("2")} {
		nack := fc.expect(frameEventNack)
		var body struct {
			DeliveryID string `json:"delivery_id"`
			Reason     string `json:"reason"`
		}
		if err := json.Unmarshal(nack.Body, &body); err != nil || body.DeliveryID != id || body.Reason == "" {
			t.Fatalf("event.nack = %s, want one of %s with a reason", nack.Body, id)
		}
	}
	ack := fc.expect(frameEventAck)
	if string(ack.Body) != ackJSON(idOf("3"), 1) {
		t.Fatalf("first event.ack = %s, want the third delivery's", ack.Body)
	}
	fc.ackReply(ack, session, false)
	// The server redelivers the failed event with a new epoch; this time
	// the handler succeeds.
	fc.deliver(session, idOf("5"), 2, testEventID)
	if ack := fc.expect(frameEventAck); string(ack.Body) != ackJSON(idOf("5"), 2) {
		t.Errorf("event.ack = %s", ack.Body)
	}
	for _, want := range []string{idOf("1"), idOf("2"), idOf("3"), idOf("5")} {
		if got := <-calls; got != want {
			t.Errorf("handler called for %s, want %s", got, want)
		}
	}
	if st := rc.c.Stats(); st.HandlerErrors != 2 || st.Delivered != 4 {
		t.Errorf("stats = %+v", st)
	}
}

func TestConsumerBoundsConcurrency(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	var running, most atomic.Int32
	release := make(chan struct{})
	started := make(chan string, 4)
	startConsumer(t, s, EventConsumerConfig{Capacity: 3, Concurrency: 2}, func(_ context.Context, d *Delivery) error {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		started <- d.ID
		<-release
		running.Add(-1)
		return nil
	})
	fc := s.accept()
	session := idOf("4")
	fc.welcomeEvents(session, longBeat)
	for _, id := range []string{idOf("1"), idOf("2"), idOf("3")} {
		fc.deliver(session, id, 1, testEventID)
	}
	if a, b := <-started, <-started; a == b || a == idOf("3") || b == idOf("3") {
		t.Errorf("started %s and %s, want the first two deliveries", a, b)
	}
	select {
	case id := <-started:
		t.Fatalf("%s started beyond Concurrency", id)
	case <-time.After(50 * time.Millisecond):
	}
	release <- struct{}{}
	if got := <-started; got != idOf("3") {
		t.Errorf("started %s after a handler returned, want the third", got)
	}
	close(release)
	for range 3 {
		fc.ackReply(fc.expect(frameEventAck), session, false)
	}
	if m := most.Load(); m != 2 {
		t.Errorf("at most %d handlers ran at once, want 2", m)
	}
}

func TestConsumerHeartbeat(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	startConsumer(t, s, EventConsumerConfig{}, func(context.Context, *Delivery) error { return nil })
	fc := s.accept()
	session := idOf("4")
	fc.welcomeEvents(session, 20*time.Millisecond)
	for range 3 {
		ping := fc.nextAny()
		if ping.Type != frameEventsPing || ping.SessionID != session || string(ping.Body) != `{}` {
			t.Fatalf("frame = %+v %s, want events.ping", ping, ping.Body)
		}
		fc.send(frameAck, ping.MessageID, session, map[string]any{"server_time": "2026-09-17T10:00:02Z", "enabled": true})
	}
}

func TestConsumerUnansweredPingReconnects(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	c, err := NewEventConsumer(EventConsumerConfig{BaseURL: s.srv.URL, Token: testToken, SubscriptionID: testSubscriptionID,
		Logger: discardLogger(), Backoff: BackoffConfig{Initial: time.Millisecond, Max: 2 * time.Millisecond}},
		func(context.Context, *Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	c.replyTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	first := s.accept()
	first.welcomeEvents(idOf("4"), 20*time.Millisecond)
	if f := first.nextAny(); f.Type != frameEventsPing { // never answered
		t.Fatalf("frame = %s, want events.ping", f.Type)
	}
	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	waitFor(t, "counted as a reconnection", func() bool { return c.Stats().Reconnects == 1 })
	select {
	case <-first.closed:
	case <-time.After(waitTime):
		t.Error("the silent connection was not closed")
	}
}

func TestConsumerResendsUnansweredAckAfterReconnect(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	first.deliver(idOf("4"), idOf("3"), 1, testEventID)
	receive(t, got)
	ack := first.expect(frameEventAck)
	first.drop() // the answer is lost with the connection

	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	again := second.expect(frameEventAck)
	if again.SessionID != idOf("5") || string(again.Body) != string(ack.Body) || again.MessageID == ack.MessageID {
		t.Errorf("re-sent event.ack = %+v %s; want the same proof %s in a new frame of the new session", again, again.Body, ack.Body)
	}
	second.ackReply(again, idOf("5"), true)
	waitFor(t, "acknowledged", func() bool { return rc.c.Stats().Acked == 1 })
	if st := rc.c.Stats(); st != (ConsumerStats{Delivered: 1, Acked: 1, Deduplicated: 1, Reconnects: 1}) {
		t.Errorf("stats = %+v", st)
	}
	// Once answered, the proof is not sent again.
	second.drop()
	third := s.accept()
	third.welcomeEvents(idOf("6"), longBeat)
	third.deliver(idOf("6"), idOf("7"), 1, testEventID)
	if ack := third.expect(frameEventAck); string(ack.Body) != ackJSON(idOf("7"), 1) {
		t.Errorf("after the answer, event.ack = %s; want only the new delivery's", ack.Body)
	}
}

func TestConsumerUnavailableAckReplyResendsOnNextConnection(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	first.deliver(idOf("4"), idOf("3"), 1, testEventID)
	receive(t, got)
	ack := first.expect(frameEventAck)
	first.sendError(ack.MessageID, idOf("4"), CodeUnavailable)
	first.drop()
	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	again := second.expect(frameEventAck)
	if string(again.Body) != string(ack.Body) {
		t.Errorf("re-sent event.ack = %s, want %s", again.Body, ack.Body)
	}
	second.ackReply(again, idOf("5"), false)
	waitFor(t, "acknowledged", func() bool { return rc.c.Stats().Acked == 1 })
}

func TestConsumerLeaseLostIsNotSuccess(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	first.deliver(idOf("4"), idOf("3"), 1, testEventID)
	receive(t, got)
	first.sendError(first.expect(frameEventAck).MessageID, idOf("4"), CodeDeliveryLeaseLost)
	waitFor(t, "counted as lost", func() bool { return rc.c.Stats().LeaseLost == 1 })
	// The connection stays; the event comes again with a new lease.
	first.deliver(idOf("4"), idOf("3"), 2, testEventID)
	if d := receive(t, got); d.Proof.Epoch != 2 {
		t.Errorf("redelivery epoch = %d", d.Proof.Epoch)
	}
	ack := first.expect(frameEventAck)
	if string(ack.Body) != ackJSON(idOf("3"), 2) {
		t.Errorf("event.ack = %s, want the new proof", ack.Body)
	}
	first.drop()
	// The dropped proof is not sent again; the unanswered new one is.
	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	again := second.expect(frameEventAck)
	if string(again.Body) != ackJSON(idOf("3"), 2) {
		t.Errorf("re-sent event.ack = %s, want only the epoch 2 proof", again.Body)
	}
	second.ackReply(again, idOf("5"), false)
	waitFor(t, "acknowledged", func() bool { return rc.c.Stats().Acked == 1 })
	if st := rc.c.Stats(); st != (ConsumerStats{Delivered: 2, Acked: 1, LeaseLost: 1, Reconnects: 1}) {
		t.Errorf("stats = %+v", st)
	}
}

func TestConsumerReconnectsAfterServerErrors(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, func(n int) (int, string, http.Header) {
		if n == 1 {
			return http.StatusServiceUnavailable, `{"request_id":"` + idOf("7") + `","error":{"code":"UNAVAILABLE","message":"starting"}}`, nil
		}
		return 0, "", nil
	})
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	first.sendError("", idOf("4"), CodeUnavailable)
	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	second.deliver(idOf("5"), idOf("3"), 1, testEventID)
	receive(t, got)
	second.ackReply(second.expect(frameEventAck), idOf("5"), false)
	if n := len(s.attemptTimes()); n != 3 {
		t.Errorf("%d upgrade requests, want 3", n)
	}
	waitFor(t, "acknowledged", func() bool { return rc.c.Stats().Acked == 1 })
	if st := rc.c.Stats(); st.Reconnects != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestConsumerStopsOnPermanentErrors(t *testing.T) {
	t.Parallel()
	refuse := func(status int, code string) func(int) (int, string, http.Header) {
		return func(int) (int, string, http.Header) {
			return status, `{"request_id":"` + idOf("7") + `","error":{"code":"` + code + `","message":"no"}}`, nil
		}
	}
	for _, c := range []struct {
		name   string
		reject func(int) (int, string, http.Header)
		// play acts the server after the welcome; nil refuses the hello.
		play func(fc *fakeConn, session string)
		code string
	}{
		{name: "Upgrade401", reject: refuse(http.StatusUnauthorized, CodeUnauthenticated), code: CodeUnauthenticated},
		{name: "Upgrade403", reject: refuse(http.StatusForbidden, CodePermissionDenied), code: CodePermissionDenied},
		{name: "Upgrade404", reject: refuse(http.StatusNotFound, CodeNotFound), code: CodeNotFound},
		{name: "HelloNotFound", code: CodeNotFound},
		{name: "HistoryExpired", code: CodeEventHistoryExpired, play: func(fc *fakeConn, session string) {
			fc.sendError("", session, CodeEventHistoryExpired)
		}},
		{name: "PermissionDeniedFrame", code: CodePermissionDenied, play: func(fc *fakeConn, session string) {
			fc.sendError("", session, CodePermissionDenied)
		}},
		{name: "PingUnauthenticated", code: CodeUnauthenticated, play: func(fc *fakeConn, session string) {
			fc.sendError(fc.nextAny().MessageID, session, CodeUnauthenticated)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := setupEventServer(t, c.reject)
			handled := make(chan struct{}, 1)
			rc := startConsumer(t, s, EventConsumerConfig{}, func(context.Context, *Delivery) error {
				handled <- struct{}{}
				return nil
			})
			if c.reject == nil {
				fc := s.accept()
				if c.play == nil {
					fc.sendError(fc.expect(frameEventsHello).MessageID, "", c.code)
				} else {
					fc.welcomeEvents(idOf("4"), 20*time.Millisecond)
					c.play(fc, idOf("4"))
				}
			}
			err := rc.wait()
			var e *APIError
			if !errors.As(err, &e) || e.Code != c.code {
				t.Fatalf("Run = %v, want %s", err, c.code)
			}
			if n := len(s.attemptTimes()); n != 1 {
				t.Errorf("%d upgrade requests, want 1", n)
			}
		})
	}
}

func TestConsumerShutdownFlushesAcksAndClosesNormally(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	started := make(chan struct{})
	var sawCancel atomic.Bool
	var calls atomic.Int32
	rc := startConsumer(t, s, EventConsumerConfig{Capacity: 2, Concurrency: 1, ShutdownTimeout: waitTime},
		func(ctx context.Context, d *Delivery) error {
			calls.Add(1)
			close(started)
			<-ctx.Done()
			sawCancel.Store(true)
			return nil // stored before the cancellation
		})
	fc := s.accept()
	session := idOf("4")
	fc.welcomeEvents(session, longBeat)
	fc.deliver(session, idOf("1"), 1, testEventID)
	fc.deliver(session, idOf("2"), 1, testEventID) // waits: Concurrency 1
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- rc.stop() }()
	ack := fc.expect(frameEventAck)
	if string(ack.Body) != ackJSON(idOf("1"), 1) {
		t.Errorf("event.ack = %s", ack.Body)
	}
	fc.deliver(session, idOf("3"), 1, testEventID) // not taken any more
	fc.ackReply(ack, session, false)
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v", err)
	}
	if code := fc.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
	if !sawCancel.Load() || calls.Load() != 1 {
		t.Errorf("handler saw cancel = %v, calls = %d; want one cancelled call", sawCancel.Load(), calls.Load())
	}
	if st := rc.c.Stats(); st.Acked != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestConsumerShutdownIsBounded(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	const bound = 200 * time.Millisecond
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{ShutdownTimeout: bound}, h)
	fc := s.accept()
	session := idOf("4")
	fc.welcomeEvents(session, longBeat)
	fc.deliver(session, idOf("1"), 1, testEventID)
	receive(t, got)
	fc.expect(frameEventAck) // never answered
	start := time.Now()
	if err := rc.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	if took := time.Since(start); took < bound || took > bound+closeWait+500*time.Millisecond {
		t.Errorf("shutdown took %v, want about %v", took, bound)
	}
	if code := fc.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
}

func TestConsumerShutdownWhileDisconnectedResendsAcks(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{ShutdownTimeout: waitTime}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	first.deliver(idOf("4"), idOf("1"), 1, testEventID)
	receive(t, got)
	first.expect(frameEventAck)
	first.drop()
	stopped := make(chan error, 1)
	go func() { stopped <- rc.stop() }()
	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	second.ackReply(second.expect(frameEventAck), idOf("5"), true)
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v", err)
	}
	if code := second.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
}

func TestNewEventConsumerChecksConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *Delivery) error { return nil }
	base := EventConsumerConfig{BaseURL: "http://127.0.0.1:1", Token: testToken, SubscriptionID: testSubscriptionID}
	c, err := NewEventConsumer(base, h)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Capacity != 1 || c.cfg.Concurrency != 1 || c.cfg.ShutdownTimeout != DefaultConsumerShutdownTimeout ||
		c.cfg.Backoff != (BackoffConfig{Initial: DefaultBackoffInitial, Max: DefaultBackoffMax}) || c.log == nil {
		t.Errorf("defaults = %+v", c.cfg)
	}
	if c, _ := NewEventConsumer(EventConsumerConfig{BaseURL: base.BaseURL, Token: testToken, SubscriptionID: testSubscriptionID, Capacity: 4}, h); c.cfg.Concurrency != 4 {
		t.Errorf("Concurrency = %d, want Capacity", c.cfg.Concurrency)
	}
	for name, mutate := range map[string]func(*EventConsumerConfig){
		"NoSubscription":      func(c *EventConsumerConfig) { c.SubscriptionID = "" },
		"CapacityTooLarge":    func(c *EventConsumerConfig) { c.Capacity = MaxEventCapacity + 1 },
		"NegativeConcurrency": func(c *EventConsumerConfig) { c.Concurrency = -1 },
		"NegativeTimeout":     func(c *EventConsumerConfig) { c.ShutdownTimeout = -time.Second },
		"NoToken":             func(c *EventConsumerConfig) { c.Token = "" },
		"BadURL":              func(c *EventConsumerConfig) { c.BaseURL = "ftp://x" },
	} {
		cfg := base
		mutate(&cfg)
		if _, err := NewEventConsumer(cfg, h); err == nil {
			t.Errorf("%s: NewEventConsumer succeeded", name)
		}
	}
	if _, err := NewEventConsumer(base, nil); err == nil {
		t.Error("nil handler accepted")
	}
}
