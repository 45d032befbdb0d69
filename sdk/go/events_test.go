package orbit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// testSecret is the seed's placeholder lease secret: 32 zero bytes in
// unpadded base64url. (testSubscriptionID and testEventID are the seed's
// IDs, declared with the management tests.)
const testSecret = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// setupEventServer starts a fake orbit.events.v1 server.
func setupEventServer(t *testing.T, reject func(n int) (int, string, http.Header)) *fakeServer {
	t.Helper()
	return setupFake(t, eventsFake, reject)
}

// welcomeEvents reads the client's events.hello and answers with an
// events.welcome for session sessionID and heartbeat hb. It returns the
// hello.
func (c *fakeConn) welcomeEvents(sessionID string, hb time.Duration) frame {
	c.t.Helper()
	hello := c.expect(frameEventsHello)
	var body eventsHelloBody
	if err := json.Unmarshal(hello.Body, &body); err != nil {
		c.t.Fatal(err)
	}
	c.send(frameEventsWelcome, hello.MessageID, sessionID, map[string]any{
		"session_id": sessionID, "subscription_id": body.SubscriptionID, "capacity": body.Capacity,
		"lease_duration_ms": 30000, "heartbeat_interval_ms": hb.Milliseconds(),
		"server_time": "2026-09-17T10:00:00Z", "enabled": true,
	})
	return hello
}

// deliver sends the seed's event.deliver for delivery id at epoch, with
// secret "secret-<id>-<epoch>" and event eventID.
func (c *fakeConn) deliver(sessionID, id string, epoch uint64, eventID string) {
	c.t.Helper()
	c.sendFrame(frame{ProtocolVersion: protocolVersion, Type: frameEventDeliver, MessageID: newMessageID(), SessionID: sessionID,
		Body: json.RawMessage(deliverJSON(id, epoch, eventID, secretOf(id, epoch)))})
}

// secretOf is the lease secret deliver sends.
func secretOf(id string, epoch uint64) string { return fmt.Sprintf("secret-%s-%d", id, epoch) }

// ackJSON is the event.ack body of the proof deliver sends.
func ackJSON(id string, epoch uint64) string {
	return fmt.Sprintf(`{"delivery_id":"%s","epoch":"%d","lease_secret":"%s"}`, id, epoch, secretOf(id, epoch))
}

// deliverJSON is the body of an event.deliver, field for field the seed's
// example.
func deliverJSON(id string, epoch uint64, eventID, secret string) string {
	return `{
    "delivery": {
      "created_at": "2026-09-17T10:00:00Z",
      "id": "` + id + `",
      "subscription_id": "` + testSubscriptionID + `",
      "event_id": "` + eventID + `",
      "sequence": "13",
      "revision": "2",
      "state": "LEASED",
      "available_at": "2026-09-17T10:00:00Z",
      "lease_epoch": "` + fmt.Sprint(epoch) + `",
      "lease_until": "2026-09-17T10:00:30Z",
      "attempts": 1,
      "attempt_budget": 20
    },
    "event": {
      "id": "` + eventID + `",
      "sequence": "13",
      "type": "task.cancelled",
      "aggregate_kind": "task",
      "aggregate_id": "66666666666666666666666666666666",
      "aggregate_revision": "2",
      "occurred_at": "2026-09-17T10:00:00Z",
      "details": {"state": "CANCELLED", "reason": "CANCEL_REQUESTED"},
      "snapshot": {
        "schema_version": 1,
        "task_id": "66666666666666666666666666666666",
        "queue_id": "11111111111111111111111111111111",
        "state": "CANCELLED",
        "revision": "2",
        "effect_uncertain": false,
        "result": {"total": 12345678901234567890123}
      }
    },
    "lease_secret": "` + secret + `"
  }`
}

// ackReply answers an event.ack frame the way the server does.
func (c *fakeConn) ackReply(ack frame, sessionID string, dedup bool) {
	c.t.Helper()
	var p AckProof
	if err := json.Unmarshal(ack.Body, &p); err != nil {
		c.t.Fatal(err)
	}
	c.send(frameAck, ack.MessageID, sessionID, map[string]any{
		"delivery_id": p.DeliveryID, "event_id": testEventID, "epoch": fmt.Sprint(p.Epoch),
		"acknowledged_at": "2026-09-17T10:00:01Z", "deduplicated": dedup,
	})
}

// dialTestEvents dials s with cfg completed by the test defaults and
// returns the connection and the server's side of it, welcomed with
// session sessionID. The connection is closed when the test ends.
func dialTestEvents(t *testing.T, s *fakeServer, cfg EventConnConfig, sessionID string) (*EventConn, *fakeConn) {
	t.Helper()
	cfg.BaseURL, cfg.Token = s.srv.URL, testToken
	if cfg.SubscriptionID == "" {
		cfg.SubscriptionID = testSubscriptionID
	}
	type dialed struct {
		c   *EventConn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := DialEvents(context.Background(), cfg)
		ch <- dialed{c, err}
	}()
	fc := s.accept()
	fc.welcomeEvents(sessionID, longBeat)
	d := <-ch
	if d.err != nil {
		t.Fatal(d.err)
	}
	t.Cleanup(func() { _ = d.c.Close() })
	return d.c, fc
}

func TestDialEventsUpgradeHelloAndWelcome(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	ch := make(chan *EventConn, 1)
	go func() {
		c, err := DialEvents(context.Background(), EventConnConfig{
			BaseURL: s.srv.URL + "/", Token: testToken, SubscriptionID: testSubscriptionID, Capacity: 2,
			Dialer: &websocket.Dialer{EnableCompression: true, Subprotocols: []string{"other"}},
		})
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	fc := s.accept()
	h := s.header(0)
	if h.Get("Authorization") != "Bearer "+testToken || h.Get("Sec-WebSocket-Protocol") != eventsProtocol ||
		h.Get("Sec-WebSocket-Extensions") != "" || h.Get("Cookie") != "" {
		t.Errorf("upgrade headers = %v", h)
	}
	hello := fc.expect(frameEventsHello)
	if hello.SessionID != "" || hello.ReplyTo != "" || hello.Error != nil || hello.ProtocolVersion != "1" || !validID(hello.MessageID) {
		t.Errorf("hello envelope = %+v", hello)
	}
	if got, want := string(hello.Body), `{"subscription_id":"`+testSubscriptionID+`","capacity":2}`; got != want {
		t.Errorf("hello body = %s, want %s", got, want)
	}
	session := idOf("4")
	fc.send(frameEventsWelcome, hello.MessageID, session, map[string]any{
		"session_id": session, "subscription_id": testSubscriptionID, "capacity": 2,
		"lease_duration_ms": 30000, "heartbeat_interval_ms": 15000, "server_time": "2026-09-17T10:00:00Z", "enabled": false,
	})
	c := <-ch
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	want := Welcome{SessionID: session, SubscriptionID: testSubscriptionID, Capacity: 2, LeaseDuration: 30 * time.Second,
		HeartbeatInterval: 15 * time.Second, ServerTime: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC), Enabled: false}
	if got := c.Welcome(); got != want {
		t.Errorf("Welcome() = %+v\nwant %+v", got, want)
	}
}

func TestDialEventsRefusals(t *testing.T) {
	t.Parallel()
	t.Run("Upgrade", func(t *testing.T) {
		t.Parallel()
		s := setupEventServer(t, func(int) (int, string, http.Header) {
			return http.StatusForbidden, `{"request_id":"` + idOf("7") + `","error":{"code":"PERMISSION_DENIED","message":"no events:consume"}}`, nil
		})
		_, err := DialEvents(context.Background(), EventConnConfig{BaseURL: s.srv.URL, Token: testToken, SubscriptionID: testSubscriptionID})
		var e *APIError
		if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != CodePermissionDenied || e.RequestID != idOf("7") {
			t.Fatalf("DialEvents = %v, want a 403 PERMISSION_DENIED *APIError", err)
		}
	})
	t.Run("Hello", func(t *testing.T) {
		t.Parallel()
		s := setupEventServer(t, nil)
		errc := make(chan error, 1)
		go func() {
			_, err := DialEvents(context.Background(), EventConnConfig{BaseURL: s.srv.URL, Token: testToken, SubscriptionID: testSubscriptionID})
			errc <- err
		}()
		fc := s.accept()
		hello := fc.expect(frameEventsHello)
		fc.sendError(hello.MessageID, "", CodeNotFound)
		err := <-errc
		var e *APIError
		if !errors.As(err, &e) || e.Status != 0 || e.Code != CodeNotFound {
			t.Fatalf("DialEvents = %v, want a NOT_FOUND *APIError", err)
		}
		if code := fc.waitClosed(); code != websocket.CloseNormalClosure {
			t.Errorf("close code = %d", code)
		}
	})
	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []EventConnConfig{
			{BaseURL: "http://127.0.0.1:1", Token: testToken},
			{BaseURL: "http://127.0.0.1:1", Token: testToken, SubscriptionID: testSubscriptionID, Capacity: MaxEventCapacity + 1},
			{BaseURL: "http://127.0.0.1:1", Token: "", SubscriptionID: testSubscriptionID},
			{BaseURL: "http://127.0.0.1:1/?t=" + testToken, Token: testToken, SubscriptionID: testSubscriptionID},
		} {
			if _, err := DialEvents(context.Background(), cfg); err == nil || strings.Contains(err.Error(), testToken) {
				t.Errorf("DialEvents(%+v) = %v", cfg.SubscriptionID, err)
			}
		}
	})
}

func TestEventConnDeliveryAckAndPing(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	session := idOf("4")
	c, fc := dialTestEvents(t, s, EventConnConfig{}, session)
	ctx := context.Background()

	fc.sendFrame(frame{ProtocolVersion: protocolVersion, Type: frameEventDeliver, MessageID: newMessageID(), SessionID: session,
		Body: json.RawMessage(deliverJSON(idOf("3"), 18446744073709551615, testEventID, testSecret))})
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 9, 17, 10, 0, 30, 0, time.UTC)
	if d.ID != idOf("3") || d.SubscriptionID != testSubscriptionID || d.EventID != testEventID || d.Sequence != 13 ||
		d.Revision != 2 || d.State != DeliveryStateLeased || d.LeaseEpoch != 18446744073709551615 ||
		d.LeaseUntil == nil || !d.LeaseUntil.Equal(until) || d.Attempts != 1 || d.AttemptBudget != 20 {
		t.Errorf("delivery = %+v", d.EventDelivery)
	}
	if d.Event.ID != testEventID || d.Event.Type != EventTypeTaskCancelled || d.Event.AggregateID != testTaskID ||
		string(d.Event.Details) != `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}` {
		t.Errorf("event = %+v", d.Event)
	}
	if snap, err := d.Event.DecodeSnapshot(); err != nil || string(snap.Result) != `{"total":12345678901234567890123}` {
		t.Errorf("snapshot = %+v, %v", snap, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(d.EventJSON, &raw); err != nil || string(raw["id"]) != `"`+testEventID+`"` ||
		string(raw["details"]) != `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}` || len(raw) != 9 {
		t.Errorf("EventJSON = %s", d.EventJSON)
	}
	if want := (AckProof{DeliveryID: idOf("3"), Epoch: 18446744073709551615, LeaseSecret: testSecret}); d.Proof != want {
		t.Errorf("proof = %#v", d.Proof)
	}

	// An ACK and a ping at once, answered in the opposite order: each call
	// gets the reply whose reply_to names its request.
	type acked struct {
		res *AckResult
		err error
	}
	ackc := make(chan acked, 1)
	go func() {
		res, err := c.Ack(ctx, d.Proof)
		ackc <- acked{res, err}
	}()
	ack := fc.expect(frameEventAck)
	pingc := make(chan *PingResult, 1)
	go func() {
		res, err := c.Ping(ctx)
		if err != nil {
			t.Error(err)
		}
		pingc <- res
	}()
	ping := fc.nextAny()
	if ping.Type != frameEventsPing || ping.SessionID != session || string(ping.Body) != `{}` || !validID(ping.MessageID) {
		t.Fatalf("ping = %+v %s", ping, ping.Body)
	}
	fc.send(frameAck, ping.MessageID, session, map[string]any{"server_time": "2026-09-17T10:00:02Z", "enabled": false})
	if res := <-pingc; res == nil || !res.ServerTime.Equal(time.Date(2026, 9, 17, 10, 0, 2, 0, time.UTC)) || res.Enabled {
		t.Errorf("Ping = %+v", res)
	}
	if ack.SessionID != session || ack.ReplyTo != "" || !validID(ack.MessageID) {
		t.Errorf("ack envelope = %+v", ack)
	}
	if got, want := string(ack.Body), `{"delivery_id":"`+idOf("3")+`","epoch":"18446744073709551615","lease_secret":"`+testSecret+`"}`; got != want {
		t.Errorf("event.ack body = %s\nwant %s", got, want)
	}
	fc.send(frameAck, ack.MessageID, session, map[string]any{"delivery_id": idOf("3"), "event_id": testEventID,
		"epoch": "18446744073709551615", "acknowledged_at": "2026-09-17T10:00:01Z", "deduplicated": true})
	a := <-ackc
	if a.err != nil {
		t.Fatal(a.err)
	}
	want := AckResult{DeliveryID: idOf("3"), EventID: testEventID, Epoch: 18446744073709551615,
		AcknowledgedAt: time.Date(2026, 9, 17, 10, 0, 1, 0, time.UTC), Deduplicated: true}
	if *a.res != want {
		t.Errorf("Ack = %+v", a.res)
	}
}

func TestEventConnLeaseLostKeepsConnection(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	session := idOf("4")
	c, fc := dialTestEvents(t, s, EventConnConfig{}, session)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctx, AckProof{DeliveryID: idOf("3"), Epoch: 1, LeaseSecret: "stale"})
		errc <- err
	}()
	ack := fc.expect(frameEventAck)
	fc.sendError(ack.MessageID, session, CodeDeliveryLeaseLost)
	err := <-errc
	var e *APIError
	if !errors.As(err, &e) || e.Code != CodeDeliveryLeaseLost || e.Status != 0 {
		t.Fatalf("Ack = %v, want DELIVERY_LEASE_LOST", err)
	}
	go func() {
		_, err := c.Ping(ctx)
		errc <- err
	}()
	ping := fc.nextAny()
	fc.send(frameAck, ping.MessageID, session, map[string]any{"server_time": "2026-09-17T10:00:02Z", "enabled": true})
	if err := <-errc; err != nil {
		t.Fatalf("Ping after DELIVERY_LEASE_LOST = %v", err)
	}
}

func TestEventConnServerErrorEndsConnection(t *testing.T) {
	t.Parallel()
	for _, code := range []string{CodeEventHistoryExpired, CodeUnavailable, CodeUnauthenticated} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			s := setupEventServer(t, nil)
			session := idOf("4")
			c, fc := dialTestEvents(t, s, EventConnConfig{}, session)
			ctx := context.Background()
			errc := make(chan error, 1)
			go func() {
				_, err := c.Ack(ctx, AckProof{DeliveryID: idOf("9"), Epoch: 1, LeaseSecret: testSecret})
				errc <- err
			}()
			fc.expect(frameEventAck)
			fc.deliver(session, idOf("3"), 1, testEventID)
			fc.sendError("", session, code)
			// The delivery that came first is still handed out.
			if d, err := c.Next(ctx); err != nil || d.ID != idOf("3") {
				t.Fatalf("Next = %v, %v; want the delivery", d, err)
			}
			for name, err := range map[string]error{"Next": nextErr(ctx, c), "Ack": <-errc} {
				var e *APIError
				if !errors.As(err, &e) || e.Code != code {
					t.Errorf("%s = %v, want %s", name, err, code)
				}
			}
			if _, err := c.Ping(ctx); !IsCode(err, code) {
				t.Errorf("Ping after the end = %v", err)
			}
		})
	}
}

// nextErr returns the error of c.Next.
func nextErr(ctx context.Context, c *EventConn) error {
	d, err := c.Next(ctx)
	if err == nil {
		return fmt.Errorf("Next returned delivery %s", d.ID)
	}
	return err
}

func TestEventConnErrorReplyThatClosesEndsNext(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	session := idOf("4")
	c, fc := dialTestEvents(t, s, EventConnConfig{}, session)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Ping(ctx)
		errc <- err
	}()
	ping := fc.nextAny()
	fc.sendError(ping.MessageID, session, CodeUnauthenticated)
	_ = fc.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "ping check failed"), time.Now().Add(time.Second))
	if err := <-errc; !IsCode(err, CodeUnauthenticated) {
		t.Errorf("Ping = %v", err)
	}
	if err := nextErr(ctx, c); !IsCode(err, CodeUnauthenticated) {
		t.Errorf("Next = %v, want UNAUTHENTICATED", err)
	}
}

func TestEventConnTraceSeesEveryFrame(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	session := idOf("4")
	var mu sync.Mutex
	var trace []string
	c, fc := dialTestEvents(t, s, EventConnConfig{Trace: func(dir string, b []byte) {
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Errorf("traced %s frame is not JSON: %s", dir, b)
		}
		mu.Lock()
		trace = append(trace, dir+" "+f.Type)
		mu.Unlock()
	}}, session)
	ctx := context.Background()
	fc.deliver(session, idOf("3"), 1, testEventID)
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctx, d.Proof)
		errc <- err
	}()
	fc.ackReply(fc.expect(frameEventAck), session, false)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"sent events.hello", "received events.welcome", "received event.deliver", "sent event.ack", "received ack"}
	if strings.Join(trace, ", ") != strings.Join(want, ", ") {
		t.Errorf("trace = %q\nwant %q", trace, want)
	}
}

func TestEventConnCloseIsNormalAndIdempotent(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	c, fc := dialTestEvents(t, s, EventConnConfig{}, idOf("4"))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Next(ctx)
		errc <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if code := fc.waitClosed(); code != websocket.CloseNormalClosure {
		t.Errorf("close code = %d", code)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
		t.Errorf("waiting Next = %v", err)
	}
	if err := nextErr(context.Background(), c); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Next after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.Ack(context.Background(), AckProof{DeliveryID: idOf("3"), Epoch: 1, LeaseSecret: testSecret}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Ack after Close = %v, want net.ErrClosed", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done is not closed after Close")
	}
}

func TestEventConnNextHonoursContext(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	c, _ := dialTestEvents(t, s, EventConnConfig{}, idOf("4"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next = %v, want the context's error", err)
	}
}

func TestAckProofHidesSecret(t *testing.T) {
	t.Parallel()
	p := AckProof{DeliveryID: idOf("3"), Epoch: 7, LeaseSecret: testSecret}
	d := Delivery{Proof: p}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "proof", p)
	for _, s := range []string{p.String(), fmt.Sprintf("%v %+v %#v", p, d, p), logged.String()} {
		if strings.Contains(s, testSecret) {
			t.Errorf("%q reveals the secret", s)
		}
		if !strings.Contains(s, idOf("3")) {
			t.Errorf("%q does not name the delivery", s)
		}
	}
	b, err := json.Marshal(p)
	if err != nil || string(b) != `{"delivery_id":"`+idOf("3")+`","epoch":"7","lease_secret":"`+testSecret+`"}` {
		t.Errorf("JSON = %s, %v", b, err)
	}
}
