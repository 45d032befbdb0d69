package workers_test

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
	"github.com/orbitrun/orbit/modules/workers"
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

func TestC17_UpgradeChecks(t *testing.T) {
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
	t.Run("OtherSubprotocol", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Subprotocol = "orbit.events.v1"
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
	t.Run("MissingTasksWork", func(t *testing.T) {
		t.Parallel()
		reader := e.srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermTasksRead, auth.PermTasksSubmit}})
		wantRefusal(t, wstest.DialRefused(t, e.options(t, reader)), http.StatusForbidden, "PERMISSION_DENIED")
	})
	t.Run("QueryParameters", func(t *testing.T) {
		t.Parallel()
		for _, query := range []string{"?queue_id=" + e.cred.QueueID, "?access_token=" + e.cred.Token, "?"} {
			o := e.options(t, e.cred)
			o.URL += query
			wantRefusal(t, wstest.DialRefused(t, o), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("CrossOrigin", func(t *testing.T) {
		t.Parallel()
		o := e.options(t, e.cred)
		o.Header = http.Header{"Origin": {"https://elsewhere.example"}}
		wantRefusal(t, wstest.DialRefused(t, o), http.StatusForbidden, "PERMISSION_DENIED")
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
		if r.Status != http.StatusMethodNotAllowed || r.Code() != "METHOD_NOT_ALLOWED" {
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
		if c.Subprotocol() != workers.Subprotocol {
			t.Errorf("sub-protocol %q, want %q", c.Subprotocol(), workers.Subprotocol)
		}
		if ext := h.Get("Sec-WebSocket-Extensions"); ext != "" {
			t.Errorf("Sec-WebSocket-Extensions %q, want none", ext)
		}
		if cookie := h.Values("Set-Cookie"); len(cookie) != 0 {
			t.Errorf("Set-Cookie %q, want none", cookie)
		}
	})

	t.Run("MaxConnections", func(t *testing.T) {
		t.Parallel()
		e := setup(t, workersConfig(func(c *workers.Config) { c.MaxConnections = 1 }))
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

func TestWorkerHello(t *testing.T) {
	t.Parallel()
	const helloTimeout = 500 * time.Millisecond
	e := setup(t, workersConfig(func(c *workers.Config) { c.HelloTimeout = helloTimeout }))

	// helloFrame returns a worker.hello of c with body.
	helloFrame := func(c *wstest.Client, body any) *wstest.Frame { return c.NewFrame(typeHello, body) }

	// refused sends a hello and checks that it is answered with code and
	// the connection closed with 1008. A hello that is well formed but not
	// allowed is sent as valid, any other as invalid.
	refused := func(t *testing.T, body any, code string) {
		t.Helper()
		c := e.dial(t, e.cred)
		f := helloFrame(c, body)
		if code == "NOT_FOUND" {
			c.SendFrame(f)
		} else {
			c.SendInvalid(f)
		}
		answer := c.Reply(f.MessageID)
		wantError(t, answer, code)
		if answer.SessionID != "" {
			t.Fatalf("error answering a refused hello carries session_id: %s", answer)
		}
		c.ExpectClose(closePolicyViolation)
	}

	t.Run("Welcome", func(t *testing.T) {
		t.Parallel()
		before := time.Now().Add(-time.Second)
		w := e.connect(t, e.cred, 3)
		doctest.Check(t, docPath, "workers-hello", w.hello.Raw)
		doctest.Check(t, docPath, "workers-welcome", w.welcome.Raw)
		b := w.body
		if w.welcome.SessionID != b.SessionID || w.welcome.ReplyTo != w.hello.MessageID {
			t.Fatalf("welcome envelope %s: want session_id = body.session_id and reply_to = the hello", w.welcome)
		}
		if b.QueueID != e.cred.QueueID || b.Capacity != 3 {
			t.Fatalf("welcome queue %s capacity %d, want %s and 3", b.QueueID, b.Capacity, e.cred.QueueID)
		}
		if b.LeaseDurationMS != workers.DefaultLeaseDuration.Milliseconds() || b.HeartbeatIntervalMS != workers.DefaultHeartbeatInterval.Milliseconds() {
			t.Fatalf("welcome lease %d ms heartbeat %d ms, want the defaults", b.LeaseDurationMS, b.HeartbeatIntervalMS)
		}
		if st := parseTime(t, b.ServerTime); st.Before(before) || st.After(time.Now().Add(time.Second)) || st.Location() != time.UTC {
			t.Fatalf("server_time %s is not now in UTC", b.ServerTime)
		}
		var (
			queueID, credentialID, name string
			capacity                    int
			closed                      *time.Time
		)
		err := e.srv.DB.QueryRowContext(context.Background(),
			`SELECT queue_id, credential_id, worker_name, capacity, closed_at FROM worker_sessions WHERE id = ?`, w.session).
			Scan(&queueID, &credentialID, &name, &capacity, &closed)
		if err != nil {
			t.Fatalf("session row: %v", err)
		}
		if queueID != e.cred.QueueID || credentialID != e.cred.CredentialID || name != "worker-1" || capacity != 3 || closed != nil {
			t.Fatalf("session row %s %s %q %d %v", queueID, credentialID, name, capacity, closed)
		}
		// Every later frame carries the session.
		ping := w.ping(t)
		wantPingAck(t, ping)
		if ping.SessionID != w.session {
			t.Fatalf("ack session_id %q, want %q", ping.SessionID, w.session)
		}
		w.Close()
		eventually(t, "the session row closed", func() bool {
			return e.count(t, `SELECT COUNT(*) FROM worker_sessions WHERE id = ? AND closed_at IS NOT NULL`, w.session) == 1
		})
	})
	t.Run("HelloTimeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		c := e.dial(t, e.cred)
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Fatalf("frames before the close: %v", rest)
		}
		if elapsed := time.Since(start); elapsed < helloTimeout {
			t.Fatalf("closed after %s, before the hello timeout of %s", elapsed, helloTimeout)
		}
	})
	t.Run("SessionIDOnHello", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		f := helloFrame(c, helloBody{QueueID: e.cred.QueueID, Capacity: 1})
		f.SessionID = wstest.NewID()
		c.SendInvalid(f)
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Fatalf("frames before the close: %v", rest)
		}
	})
	t.Run("CapacityZero", func(t *testing.T) {
		t.Parallel()
		refused(t, helloBody{QueueID: e.cred.QueueID, Capacity: 0}, "INVALID_ARGUMENT")
	})
	t.Run("CapacityOverMax", func(t *testing.T) {
		t.Parallel()
		refused(t, helloBody{QueueID: e.cred.QueueID, Capacity: workers.MaxCapacity + 1}, "INVALID_ARGUMENT")
	})
	t.Run("CapacityNotANumber", func(t *testing.T) {
		t.Parallel()
		refused(t, map[string]any{"queue_id": e.cred.QueueID, "capacity": "2"}, "INVALID_ARGUMENT")
	})
	t.Run("MissingQueue", func(t *testing.T) {
		t.Parallel()
		refused(t, map[string]any{"capacity": 1}, "INVALID_ARGUMENT")
	})
	t.Run("UnknownField", func(t *testing.T) {
		t.Parallel()
		refused(t, map[string]any{"queue_id": e.cred.QueueID, "capacity": 1, "priority": 1}, "INVALID_ARGUMENT")
	})
	t.Run("BadWorkerName", func(t *testing.T) {
		t.Parallel()
		refused(t, helloBody{QueueID: e.cred.QueueID, Capacity: 1, WorkerName: "-bad name"}, "INVALID_ARGUMENT")
	})
	t.Run("QueueNotGranted", func(t *testing.T) {
		t.Parallel()
		other := e.credential(t, "other")
		refused(t, helloBody{QueueID: other.QueueID, Capacity: 1}, "NOT_FOUND")
	})
	t.Run("QueueUnknown", func(t *testing.T) {
		t.Parallel()
		refused(t, helloBody{QueueID: wstest.NewID(), Capacity: 1}, "NOT_FOUND")
	})
	t.Run("OtherFrameFirst", func(t *testing.T) {
		t.Parallel()
		c := e.dial(t, e.cred)
		f := c.NewFrame(typePing, struct{}{})
		c.SendInvalid(f)
		wantError(t, c.Reply(f.MessageID), "INVALID_ARGUMENT")
		c.ExpectClose(closePolicyViolation)
	})
	t.Run("SecondHello", func(t *testing.T) {
		t.Parallel()
		w := e.connect(t, e.cred, 1)
		f := w.NewFrame(typeHello, helloBody{QueueID: e.cred.QueueID, Capacity: 1})
		f.SessionID = w.session
		w.SendInvalid(f)
		wantError(t, w.Reply(f.MessageID), "INVALID_ARGUMENT")
		wantPingAck(t, w.ping(t))
	})
}

func TestC18_EnvelopeRules(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// closes sends data as a message of messageType, after the hello when
	// welcomed, and expects the connection to close with code and no
	// answer.
	closes := func(t *testing.T, welcomed bool, messageType int, data func(session string) []byte, code int) {
		t.Helper()
		var c *wstest.Client
		session := ""
		if welcomed {
			w := e.connect(t, e.cred, 1)
			c, session = w.Client, w.session
		} else {
			c = e.dial(t, e.cred)
		}
		c.SendRaw(messageType, data(session))
		if rest := c.ExpectClose(code); len(rest) != 0 {
			t.Fatalf("answers before the close: %v", rest)
		}
	}
	text := func(s string) func(string) []byte {
		return func(session string) []byte { return []byte(strings.ReplaceAll(s, "SESSION", session)) }
	}
	id := wstest.NewID()

	invalid := []struct {
		name     string
		welcomed bool
		frame    string
	}{
		{"NotJSON", false, `hello`},
		{"NotAnObject", true, `["worker.ping"]`},
		{"MissingMessageID", true, `{"protocol_version":"1","type":"worker.ping","session_id":"SESSION","body":{}}`},
		{"UppercaseMessageID", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + strings.ToUpper(id) + `","session_id":"SESSION","body":{}}`},
		{"WrongProtocolVersion", true, `{"protocol_version":"2","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{}}`},
		{"ProtocolVersionNumber", true, `{"protocol_version":1,"type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{}}`},
		{"UnknownMember", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{},"priority":1}`},
		{"OtherCaseMember", true, `{"protocol_version":"1","Type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{}}`},
		{"DuplicateMember", true, `{"protocol_version":"1","type":"worker.ping","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{}}`},
		{"DuplicateInBody", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{"a":1,"a":2}}`},
		{"TrailingData", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":{}} {}`},
		{"NullBody", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","body":null}`},
		{"ErrorMemberFromClient", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"SESSION","error":{"code":"X","message":"x"}}`},
		{"InvalidUTF8", true, "{\"protocol_version\":\"1\",\"type\":\"worker.ping\",\"message_id\":\"" + id + "\",\"session_id\":\"SESSION\",\"body\":{\"x\":\"\xff\"}}"},
		{"MissingSession", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","body":{}}`},
		{"WrongSession", true, `{"protocol_version":"1","type":"worker.ping","message_id":"` + id + `","session_id":"` + wstest.NewID() + `","body":{}}`},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			closes(t, tt.welcomed, websocket.TextMessage, text(tt.frame), closePolicyViolation)
		})
	}
	t.Run("BinaryFrame", func(t *testing.T) {
		t.Parallel()
		closes(t, true, websocket.BinaryMessage, func(session string) []byte {
			return []byte(`{"protocol_version":"1","type":"worker.ping","message_id":"` + wstest.NewID() + `","session_id":"` + session + `","body":{}}`)
		}, closePolicyViolation)
	})
	t.Run("Oversized", func(t *testing.T) {
		t.Parallel()
		closes(t, true, websocket.TextMessage, func(session string) []byte {
			pad := strings.Repeat("x", 512<<10)
			return []byte(`{"protocol_version":"1","type":"worker.ping","message_id":"` + wstest.NewID() + `","session_id":"` + session + `","body":{"pad":"` + pad + `"}}`)
		}, closeTooBig)
	})
	t.Run("UnknownTypeKeepsConnection", func(t *testing.T) {
		t.Parallel()
		w := e.connect(t, e.cred, 1)
		f := w.NewFrame("worker.dance", struct{}{})
		w.SendInvalid(f)
		answer := w.Reply(f.MessageID)
		wantError(t, answer, "INVALID_ARGUMENT")
		if answer.SessionID != w.session {
			t.Fatalf("error session_id %q, want %q", answer.SessionID, w.session)
		}
		wantPingAck(t, w.ping(t))
	})

	// Errors in a body are answered and keep the connection (the envelope
	// was fine).
	bodyErrors := []struct {
		name string
		typ  string // default task.complete
		body string // "" sends no body
	}{
		{"PingUnknownField", typePing, `{"busy":true}`},
		{"PingWithoutBody", typePing, ``},
		{"ReleaseWithoutReason", typeRelease, `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"SECRET"}`},
		{"EpochLeadingZero", "", `{"task_id":"ID","attempt_id":"ID","epoch":"01","lease_secret":"SECRET","outcome":"succeeded"}`},
		{"EpochNumber", "", `{"task_id":"ID","attempt_id":"ID","epoch":1,"lease_secret":"SECRET","outcome":"succeeded"}`},
		{"EpochOutOfRange", "", `{"task_id":"ID","attempt_id":"ID","epoch":"18446744073709551616","lease_secret":"SECRET","outcome":"succeeded"}`},
		{"SecretPadded", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"SECRET=","outcome":"succeeded"}`},
		{"SecretNonCanonical", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"NONCANONICAL","outcome":"succeeded"}`},
		{"SecretStandardAlphabet", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"STANDARD","outcome":"succeeded"}`},
		{"UnknownOutcome", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"SECRET","outcome":"done"}`},
		{"MissingOutcome", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"SECRET"}`},
		{"UnknownField", "", `{"task_id":"ID","attempt_id":"ID","epoch":"1","lease_secret":"SECRET","outcome":"succeeded","retry":true}`},
		{"BadTaskID", "", `{"task_id":"x","attempt_id":"ID","epoch":"1","lease_secret":"SECRET","outcome":"succeeded"}`},
		{"MissingBody", "", ``},
	}
	secret := otherSecret("")
	// The last of 43 characters carries 2 unused bits; "B" sets one.
	nonCanonical := secret[:42] + "B"
	standard := "+" + secret[1:]
	for _, tt := range bodyErrors {
		t.Run("Body"+tt.name, func(t *testing.T) {
			t.Parallel()
			w := e.connect(t, e.cred, 1)
			typ := tt.typ
			if typ == "" {
				typ = typeComplete
			}
			f := w.NewFrame(typ, nil)
			if tt.body != "" {
				r := strings.NewReplacer("ID", wstest.NewID(), "NONCANONICAL", nonCanonical, "STANDARD", standard, "SECRET", secret)
				f.Body = json.RawMessage(r.Replace(tt.body))
			}
			if tt.name == "EpochOutOfRange" {
				// The schema's pattern cannot bound a uint64 exactly;
				// the server does.
				raw, _ := json.Marshal(f)
				w.SendRaw(websocket.TextMessage, raw)
			} else {
				w.SendInvalid(f)
			}
			wantError(t, w.Reply(f.MessageID), "INVALID_ARGUMENT")
			wantPingAck(t, w.ping(t))
		})
	}
}

func TestPingRechecksCredential(t *testing.T) {
	t.Parallel()
	// Leases check the credential too (TestT3_EveryLeaseChecksTheGrant);
	// here they run only after the welcome and when tasks are signalled,
	// so that once the first has run the ping is what finds the change.
	e := setup(t, workersConfig(func(c *workers.Config) { c.PollInterval = time.Hour }))
	cred := e.credential(t, "q")
	w := e.connect(t, cred, 1)
	wantPingAck(t, w.ping(t))
	w.settle()
	if err := admin.NewStore(e.srv.DB).CredentialRevoke(context.Background(), cred.CredentialID, "test"); err != nil {
		t.Fatal(err)
	}
	answer := w.ping(t)
	wantError(t, answer, "UNAUTHENTICATED")
	doctest.Check(t, docPath, "workers-error-unauthenticated", answer.Raw)
	w.ExpectClose(closePolicyViolation)
	// The revoked credential cannot connect again.
	wantRefusal(t, wstest.DialRefused(t, e.options(t, cred)), http.StatusUnauthorized, "UNAUTHENTICATED")
}
