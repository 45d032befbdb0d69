package events_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/events"
)

// wantRefusal checks the HTTP answer to a refused upgrade.
func wantRefusal(t *testing.T, r *wstest.Refusal, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	requestID, got, _, err := r.Envelope()
	if err != nil {
		t.Fatal(err)
	}
	if got != code {
		t.Fatalf("code %q, want %q", got, code)
	}
	if requestID == "" || r.Header.Get("X-Request-Id") != requestID {
		t.Fatalf("request_id %q, X-Request-ID %q", requestID, r.Header.Get("X-Request-Id"))
	}
}

// TestE1_UpgradeChecks: the sub-protocol, the credential, events:consume,
// the query and the origin are checked before the upgrade and refused as
// HTTP replies; the node's connection limit answers 429 with Retry-After;
// an accepted upgrade negotiates no compression and sets no cookie; a frame
// over 512 KiB closes the connection with 1009.
func TestE1_UpgradeChecks(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("NoSubprotocol", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Subprotocol = ""
		r := wstest.DialRefused(t, o)
		wantRefusal(t, r, http.StatusUpgradeRequired, "PROTOCOL_REQUIRED")
		if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("Sec-WebSocket-Version") != "13" {
			t.Fatalf("headers %v, want Upgrade: websocket and Sec-WebSocket-Version: 13", r.Header)
		}
	})
	t.Run("WorkerSubprotocol", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Subprotocol = "orbit.workers.v1"
		wantRefusal(t, wstest.DialRefused(t, o), http.StatusUpgradeRequired, "PROTOCOL_REQUIRED")
	})
	t.Run("NoAuthorization", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Token = ""
		wantRefusal(t, wstest.DialRefused(t, o), http.StatusUnauthorized, "UNAUTHENTICATED")
	})
	t.Run("UnknownToken", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Token = "orbit_unknown"
		wantRefusal(t, wstest.DialRefused(t, o), http.StatusUnauthorized, "UNAUTHENTICATED")
	})
	t.Run("RevokedToken", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, servertest.CredentialParams{})
		if err := admin.NewStore(e.srv.DB).CredentialRevoke(context.Background(), cred.CredentialID, "test"); err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, wstest.DialRefused(t, e.options(t, cred)), http.StatusUnauthorized, "UNAUTHENTICATED")
	})
	t.Run("ReadPermissionOnly", func(t *testing.T) {
		t.Parallel()
		// Reading subscriptions does not grant consuming them (E-2).
		reader := e.credential(t, servertest.CredentialParams{Permissions: []string{auth.PermEventsRead}})
		wantRefusal(t, wstest.DialRefused(t, e.options(t, reader)), http.StatusForbidden, "PERMISSION_DENIED")
	})
	t.Run("ManageWithoutConsume", func(t *testing.T) {
		t.Parallel()
		manager := e.credential(t, servertest.CredentialParams{Permissions: []string{auth.PermEventsManage, auth.PermEventsRead}})
		wantRefusal(t, wstest.DialRefused(t, e.options(t, manager)), http.StatusForbidden, "PERMISSION_DENIED")
	})
	t.Run("QueryParameters", func(t *testing.T) {
		t.Parallel()
		for _, query := range []string{"?subscription_id=" + strings.Repeat("2", 32), "?access_token=" + e.cred.Token, "?"} {
			o := e.options(t, e.cred)
			o.URL += query
			wantRefusal(t, wstest.DialRefused(t, o), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("CrossOrigin", func(t *testing.T) {
		t.Parallel()
		for _, origin := range []string{"https://elsewhere.example", "null"} {
			o := e.options(t, e.cred)
			o.Header = http.Header{"Origin": {origin}}
			wantRefusal(t, wstest.DialRefused(t, o), http.StatusForbidden, "PERMISSION_DENIED")
		}
	})
	t.Run("SameOrigin", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Header = http.Header{"Origin": {e.srv.URL}}
		wstest.Dial(t, o).Close()
	})
	t.Run("WrongMethod", func(t *testing.T) {
		t.Parallel()
		r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: connectPath, Token: e.cred.Token, Body: `{}`})
		if r.Status != http.StatusMethodNotAllowed {
			t.Fatalf("POST: %d %s", r.Status, r.Body)
		}
	})
	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		// Compression is offered and must not be negotiated (C-17).
		o.OfferCompression = true
		c := wstest.Dial(t, o)
		defer c.Close()
		h := c.Response.Header
		if c.Subprotocol() != events.Subprotocol {
			t.Errorf("sub-protocol %q, want %q", c.Subprotocol(), events.Subprotocol)
		}
		if ext := h.Get("Sec-WebSocket-Extensions"); ext != "" {
			t.Errorf("Sec-WebSocket-Extensions %q, want none", ext)
		}
		if cookie := h.Values("Set-Cookie"); len(cookie) != 0 {
			t.Errorf("Set-Cookie %q, want none", cookie)
		}
	})
	t.Run("OversizedFrame", func(t *testing.T) {
		t.Parallel()
		sub := e.subscribe(t, e.cred, subscriptionParams{})
		c := e.connect(t, e.cred, sub, 1)
		c.SendRaw(websocket.TextMessage, []byte(`{"pad":"`+strings.Repeat("x", 512<<10)+`"}`))
		c.ExpectClose(closeTooBig)
	})

	t.Run("MaxConnections", func(t *testing.T) {
		t.Parallel()
		e := setup(t, eventsConfig(func(c *events.Config) { c.MaxConnections = 1 }))
		first := e.dial(t, e.cred)
		r := wstest.DialRefused(t, e.options(t, e.cred))
		wantRefusal(t, r, http.StatusTooManyRequests, "CAPACITY_EXCEEDED")
		if got := r.Header.Get("Retry-After"); got != "1" {
			t.Fatalf("Retry-After %q, want 1", got)
		}
		// The slot is free again once the first connection has ended.
		first.Close()
		eventually(t, "a connection after the first one closed", func() bool {
			c, err := wstest.TryDial(t, e.options(t, e.cred))
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	})
}

// TestE2_Hello: hello must come within hello_timeout, without session_id,
// reply_to or error, with a capacity of 1 to 32; only then are the
// subscription's owner and queue scope checked, and a refusal is an error
// frame without session_id followed by the close.
func TestE2_Hello(t *testing.T) {
	t.Parallel()
	const helloTimeout = 300 * time.Millisecond
	e := setup(t, eventsConfig(func(c *events.Config) { c.HelloTimeout = helloTimeout }))
	sub := e.subscribe(t, e.cred, subscriptionParams{})

	// refused sends f, which the schema must refuse too when invalid is
	// set, and checks the error frame that answers it and the close.
	refused := func(t *testing.T, c *wstest.Client, f *wstest.Frame, invalid bool, code string) {
		t.Helper()
		if invalid {
			c.SendInvalid(f)
		} else {
			c.SendFrame(f)
		}
		answer := c.Reply(f.MessageID)
		wantError(t, answer, code)
		if answer.SessionID != "" {
			t.Fatalf("hello refused with a session_id: %s", answer)
		}
		c.ExpectClose(closePolicyViolation)
	}

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		start := time.Now()
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Fatalf("frames before the close: %v", rest)
		}
		if waited := time.Since(start); waited < helloTimeout-50*time.Millisecond {
			t.Fatalf("closed after %s, before the hello timeout of %s", waited, helloTimeout)
		}
	})
	t.Run("WithSessionID", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		f := c.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
		f.SessionID = wstest.NewID()
		c.SendInvalid(f)
		// An invalid envelope: closed without an error frame.
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Fatalf("frames before the close: %s", rest[0])
		}
	})
	t.Run("WithReplyTo", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		f := c.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
		f.ReplyTo = wstest.NewID()
		refused(t, c, f, true, "INVALID_ARGUMENT")
	})
	t.Run("WithError", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		f := c.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
		f.Error = &wstest.FrameError{Code: "INVALID_ARGUMENT", Message: "no"}
		c.SendInvalid(f)
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Fatalf("frames before the close: %s", rest[0])
		}
	})
	t.Run("FirstFrameNotHello", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		refused(t, c, c.NewFrame(typePing, struct{}{}), true, "INVALID_ARGUMENT")
	})
	t.Run("Capacity", func(t *testing.T) {
		t.Parallel()
		for _, capacity := range []any{0, 33, -1, "1", 1.5, nil} {
			c := e.dial(t, e.cred)
			body := map[string]any{"subscription_id": sub}
			if capacity != nil {
				body["capacity"] = capacity
			}
			refused(t, c, c.NewFrame(typeHello, body), true, "INVALID_ARGUMENT")
		}
		for _, capacity := range []int{1, 32} {
			c := e.connect(t, e.cred, sub, capacity)
			if c.body.Capacity != capacity {
				t.Fatalf("welcome capacity %d, want %d", c.body.Capacity, capacity)
			}
			c.Close()
		}
	})
	t.Run("MalformedSubscriptionID", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		refused(t, c, c.NewFrame(typeHello, helloBody{SubscriptionID: strings.ToUpper(sub), Capacity: 1}), true, "INVALID_ARGUMENT")
	})
	t.Run("UnknownSubscription", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		refused(t, c, c.NewFrame(typeHello, helloBody{SubscriptionID: wstest.NewID(), Capacity: 1}), false, "NOT_FOUND")
	})
	t.Run("OtherCredentialsSubscription", func(t *testing.T) {
		t.Parallel()
		// Same namespace, same queue, same permissions: still not its
		// subscription.
		other := e.credential(t, servertest.CredentialParams{})
		c := e.dial(t, other)
		hello := c.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
		refused(t, c, hello, false, "NOT_FOUND")
		var answer []byte
		for _, r := range c.Records() {
			if r.Direction == wstest.Received && r.Type == typeError {
				answer = r.Raw
			}
		}
		doctest.Check(t, docPath, "events-error-hello", answer)
	})
	t.Run("QueueOutsideGrants", func(t *testing.T) {
		t.Parallel()
		owner := e.credential(t, servertest.CredentialParams{Queue: "q-grant"})
		own := e.subscribe(t, owner, subscriptionParams{})
		if _, err := e.srv.DB.Exec(`DELETE FROM credential_queue_grants WHERE credential_id = ?`, owner.CredentialID); err != nil {
			t.Fatal(err)
		}
		c := e.dial(t, owner)
		refused(t, c, c.NewFrame(typeHello, helloBody{SubscriptionID: own, Capacity: 1}), false, "NOT_FOUND")
	})
	t.Run("ConsumeDoesNotGrantReading", func(t *testing.T) {
		t.Parallel()
		consumerOnly := e.credential(t, servertest.CredentialParams{Queue: "q-consume", Permissions: []string{auth.PermEventsConsume, auth.PermEventsManage}})
		own := e.subscribe(t, consumerOnly, subscriptionParams{})
		e.connect(t, consumerOnly, own, 1).Close()
		for _, path := range []string{"/v1/subscriptions/" + own, "/v1/subscriptions/" + own + "/deliveries"} {
			r := e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path, Token: consumerOnly.Token})
			if r.Status != http.StatusForbidden || r.Code() != "PERMISSION_DENIED" {
				t.Fatalf("GET %s with events:consume only: %d %s", path, r.Status, r.Body)
			}
		}
	})
}

// TestE3_Welcome: events.welcome answers hello with reply_to, a new
// message_id, and the session id in the envelope and the body together
// with the connection's parameters. The example frames of events.md come
// from this test.
func TestE3_Welcome(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	before := time.Now().Add(-time.Millisecond)
	c := e.connect(t, e.cred, sub, 4)
	after := time.Now()

	w := c.welcome
	if w.ReplyTo != c.hello.MessageID {
		t.Errorf("reply_to %q, want the hello's message_id %q", w.ReplyTo, c.hello.MessageID)
	}
	if w.MessageID == c.hello.MessageID {
		t.Errorf("welcome reuses the hello's message_id")
	}
	if w.SessionID == "" || w.SessionID != c.body.SessionID {
		t.Errorf("envelope session_id %q, body session_id %q", w.SessionID, c.body.SessionID)
	}
	wantMembers(t, "welcome body", w.Body, "session_id", "subscription_id", "capacity", "lease_duration_ms",
		"heartbeat_interval_ms", "server_time", "enabled", "redelivery_horizon")
	if c.body.SubscriptionID != sub || c.body.Capacity != 4 || !c.body.Enabled {
		t.Errorf("welcome body %+v", c.body)
	}
	if c.body.LeaseDurationMS != 30000 || c.body.HeartbeatIntervalMS != 15000 {
		t.Errorf("lease_duration_ms %d, heartbeat_interval_ms %d, want 30000 and 15000", c.body.LeaseDurationMS, c.body.HeartbeatIntervalMS)
	}
	if st := parseTime(t, c.body.ServerTime); st.Before(before) || st.After(after) {
		t.Errorf("server_time %s not between %s and %s", st, before, after)
	}

	// The session is recorded with its capacity.
	var subscriptionID, credentialID string
	var capacity int
	var closed *time.Time
	err := e.srv.DB.QueryRow(`SELECT subscription_id, credential_id, capacity, closed_at FROM event_sessions WHERE id = ?`, c.session).
		Scan(&subscriptionID, &credentialID, &capacity, &closed)
	if err != nil {
		t.Fatal(err)
	}
	if subscriptionID != sub || credentialID != e.cred.CredentialID || capacity != 4 || closed != nil {
		t.Errorf("event_sessions row %s %s %d %v", subscriptionID, credentialID, capacity, closed)
	}

	// Every connection gets its own session.
	other := e.connect(t, e.cred, sub, 1)
	if other.session == c.session {
		t.Errorf("two connections share session %s", c.session)
	}

	doctest.Check(t, docPath, "events-hello", c.hello.Raw)
	doctest.Check(t, docPath, "events-welcome", w.Raw)
}

// TestE5_SessionIDs: every later client frame must carry the session id
// (a missing or wrong one closes with 1008); a reconnect gets a new session
// id, the old connection's leases stay, and its proofs ACK on the new one.
func TestE5_SessionIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("MissingSessionID", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		f := c.NewFrame(typePing, struct{}{})
		f.SessionID = ""
		c.SendInvalid(f)
		c.ExpectClose(closePolicyViolation)
	})
	t.Run("WrongSessionID", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		other := e.connect(t, cred, sub, 1)
		// The session of another live connection is as wrong as any.
		f := c.NewFrame(typePing, struct{}{})
		f.SessionID = other.session
		c.SendFrame(f)
		c.ExpectClose(closePolicyViolation)
		wantPingReply(t, other.ping(t))
	})
	t.Run("ReconnectAcksOldProof", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		first := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := first.deliver(t)
		first.Close()
		eventually(t, "the first session closed", func() bool {
			return e.count(t, `SELECT COUNT(*) FROM event_sessions WHERE id = ? AND closed_at IS NOT NULL`, first.session) == 1
		})
		// The lease survives the connection.
		if row := e.deliveryRow(t, d.Delivery.ID); row.State != "LEASED" || row.Session.String != first.session {
			t.Fatalf("after the close: %+v", row)
		}

		second := e.connect(t, cred, sub, 1)
		if second.session == first.session {
			t.Fatalf("the reconnect got the old session id %s", first.session)
		}
		r := second.acked(t, d.proof())
		if r.Deduplicated || r.DeliveryID != d.Delivery.ID || r.Epoch != d.Delivery.LeaseEpoch {
			t.Fatalf("ack of the old proof on the new connection: %+v", r)
		}
		var ackSession string
		if err := e.srv.DB.QueryRow(`SELECT session_id FROM delivery_acks WHERE delivery_id = ?`, d.Delivery.ID).Scan(&ackSession); err != nil {
			t.Fatal(err)
		}
		if ackSession != second.session {
			t.Fatalf("delivery_acks.session_id %s, want the new session %s", ackSession, second.session)
		}
	})
}

// TestE5_SessionClosedWithItsConnection: a session is recorded only for
// its connection's life. Connections that break while their hello is
// being answered, at varied moments, leave no session marked open.
func TestE5_SessionClosedWithItsConnection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	header := http.Header{"Authorization": {"Bearer " + e.cred.Token}}
	d := websocket.Dialer{Subprotocols: []string{events.Subprotocol}, HandshakeTimeout: bound}
	for i := range 60 {
		ws, _, err := d.Dial(e.url, header)
		if err != nil {
			t.Fatal(err)
		}
		hello, _ := json.Marshal(map[string]any{
			"protocol_version": "1", "type": typeHello, "message_id": wstest.NewID(),
			"body": helloBody{SubscriptionID: sub, Capacity: 1},
		})
		if err := ws.WriteMessage(websocket.TextMessage, hello); err != nil {
			t.Fatal(err)
		}
		// The socket breaks up to 4 ms after the hello, spread over the
		// server's answering it.
		time.Sleep(time.Duration(i%20) * 200 * time.Microsecond)
		ws.UnderlyingConn().Close()
	}
	eventually(t, "every session closed", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM event_sessions WHERE subscription_id = ? AND closed_at IS NULL`, sub) == 0
	})
	// The node's connection slots are free again too.
	e.connect(t, e.cred, sub, 1).Close()
}

// rawHello opens a connection without the recording client, for tests that
// must break the socket themselves; frames are still checked against the
// schema.
func rawHello(t *testing.T, e *env, subscriptionID string, capacity int) (*websocket.Conn, string) {
	t.Helper()
	header := http.Header{"Authorization": {"Bearer " + e.cred.Token}}
	d := websocket.Dialer{Subprotocols: []string{events.Subprotocol}, HandshakeTimeout: bound}
	ws, _, err := d.Dial(e.url, header)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	hello, _ := json.Marshal(map[string]any{
		"protocol_version": "1", "type": typeHello, "message_id": wstest.NewID(),
		"body": helloBody{SubscriptionID: subscriptionID, Capacity: capacity},
	})
	if err := schema(t).ValidateClient(hello); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, hello); err != nil {
		t.Fatal(err)
	}
	welcome := rawRead(t, ws)
	if welcome.Type != typeWelcome {
		t.Fatalf("answer to hello: %s", welcome)
	}
	return ws, welcome.SessionID
}

// rawRead reads one frame from ws and checks it against the schema.
func rawRead(t *testing.T, ws *websocket.Conn) *wstest.Frame {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(bound))
	_, raw, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if err := schema(t).ValidateServer(raw); err != nil {
		t.Errorf("server frame breaks the schema: %v\n%s", err, raw)
	}
	f := &wstest.Frame{Raw: raw}
	if err := json.Unmarshal(raw, f); err != nil {
		t.Fatal(err)
	}
	return f
}
