package wsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
)

const (
	testProtocol = "orbit.events.v1"
	testPath     = "/v1/events/connect"
	// testWait bounds every wait for something that should happen at once;
	// it only turns a hang into a failure.
	testWait = 10 * time.Second
)

// Tokens understood by testAuthenticate.
const (
	tokenConsumer = "Bearer consumer"
	tokenReader   = "Bearer reader"
	tokenBroken   = "Bearer broken"
)

// testAuthenticate stands in for auth.Authenticator: "consumer" holds
// events:consume, "reader" only events:read, "broken" fails like a
// database outage, anything else is unauthenticated.
func testAuthenticate(r *http.Request) (*auth.Principal, error) {
	switch r.Header.Get("Authorization") {
	case tokenConsumer:
		return &auth.Principal{CredentialID: strings.Repeat("c", 32), Permissions: map[string]bool{auth.PermEventsConsume: true}}, nil
	case tokenReader:
		return &auth.Principal{CredentialID: strings.Repeat("d", 32), Permissions: map[string]bool{auth.PermEventsRead: true}}, nil
	case tokenBroken:
		return nil, errors.New("auth: look up credential: connection refused")
	}
	return nil, auth.ErrUnauthenticated
}

// testEnv is an HTTP server with one entry at testPath. Every connection
// it upgrades is handed to the test through conns.
type testEnv struct {
	entry  *Entry
	srv    *httptest.Server
	client *http.Client
	url    string // ws://…/v1/events/connect
	http   string // http://…/v1/events/connect
	conns  chan *Conn
}

// setup starts a server whose entry has the test configuration changed by
// mutate. The entry is shut down and the server closed when the test ends.
func setup(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	cfg := Config{
		Subprotocol:  testProtocol,
		Permission:   auth.PermEventsConsume,
		Authenticate: testAuthenticate,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	entry, err := NewEntry(cfg)
	if err != nil {
		t.Fatalf("NewEntry: %v", err)
	}
	env := &testEnv{entry: entry, conns: make(chan *Conn, 128)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := entry.Upgrade(w, r)
		if err != nil {
			return
		}
		env.conns <- c
	})
	env.srv = httptest.NewServer(httpx.Middleware(httpx.MiddlewareOptions{Logger: cfg.Logger}, httpx.NoDeadline(handler)))
	env.client = &http.Client{Transport: &http.Transport{}, Timeout: testWait}
	env.http = env.srv.URL + testPath
	env.url = "ws" + strings.TrimPrefix(env.http, "http")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		if err := entry.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		env.srv.Close()
		env.client.CloseIdleConnections()
	})
	return env
}

// dial opens a client connection with the consumer token and returns it
// with the server's side.
func (env *testEnv) dial(t *testing.T) (*websocket.Conn, *Conn) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{testProtocol}, HandshakeTimeout: testWait}
	ws, resp, err := d.Dial(env.url, http.Header{"Authorization": {tokenConsumer}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial: %v (status %d)", err, status)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws, env.accept(t)
}

// accept returns the next connection the server upgraded.
func (env *testEnv) accept(t *testing.T) *Conn {
	t.Helper()
	select {
	case c := <-env.conns:
		return c
	case <-time.After(testWait):
		t.Fatal("no connection was upgraded")
		return nil
	}
}

// upgradeRequest returns a valid upgrade request for env, made with
// net/http so that tests can change any part of it.
func (env *testEnv) upgradeRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, env.http, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-WebSocket-Protocol", testProtocol)
	req.Header.Set("Authorization", tokenConsumer)
	return req
}

// do sends req and returns the response with its body read.
func (env *testEnv) do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := env.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// errorReply is a decoded HTTP error envelope.
type errorReply struct {
	RequestID string `json:"request_id"`
	Error     struct {
		Code    httpx.Code `json:"code"`
		Message string     `json:"message"`
	} `json:"error"`
}

// checkRejected checks that resp is an error envelope (C-6) with status and
// code, sets no cookie and did not upgrade.
func checkRejected(t *testing.T, resp *http.Response, body []byte, code httpx.Code) errorReply {
	t.Helper()
	if resp.StatusCode != code.Status() {
		t.Errorf("status = %d, want %d; body %s", resp.StatusCode, code.Status(), body)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) > 0 {
		t.Errorf("Set-Cookie = %q, want none", got)
	}
	var reply errorReply
	if err := httpx.DecodeJSONBytes(body, &reply); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if !httpx.ValidID(reply.RequestID) || reply.RequestID != resp.Header.Get("X-Request-ID") {
		t.Errorf("request_id = %q, X-Request-ID = %q", reply.RequestID, resp.Header.Get("X-Request-ID"))
	}
	if reply.Error.Code != code || reply.Error.Message == "" {
		t.Errorf("error = %+v, want code %s", reply.Error, code)
	}
	return reply
}

// Frame texts for clients. IDs of one repeated digit are easy to read.
var (
	idA = strings.Repeat("a", 32)
	idB = strings.Repeat("b", 32)
	idC = strings.Repeat("c", 32)
)

// helloText is the hello of seed 001 §5.
const helloText = `{"protocol_version":"1","type":"events.hello","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","body":{"subscription_id":"22222222222222222222222222222222","capacity":1}}`

// pingText returns an events.ping with a new message id and session
// ("" leaves session_id out).
func pingText(session string) string {
	s := ""
	if session != "" {
		s = fmt.Sprintf(`,"session_id":%q`, session)
	}
	return fmt.Sprintf(`{"protocol_version":"1","type":"events.ping","message_id":%q%s,"body":{}}`, NewID(), s)
}

// send writes a text frame from the client.
func send(t *testing.T, ws *websocket.Conn, text string) {
	t.Helper()
	_ = ws.SetWriteDeadline(time.Now().Add(testWait))
	if err := ws.WriteMessage(websocket.TextMessage, []byte(text)); err != nil {
		t.Fatalf("client write: %v", err)
	}
}

// readFrame reads and strictly decodes the next frame the client gets.
func readFrame(t *testing.T, ws *websocket.Conn) *Frame {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(testWait))
	typ, b, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("client read: %v", err)
	}
	if typ != websocket.TextMessage {
		t.Fatalf("client read message type %d, want text", typ)
	}
	f, err := DecodeFrame(b)
	if err != nil {
		t.Fatalf("server frame %s: %v", b, err)
	}
	return f
}

// expectClose reads until the connection ends and checks that the server
// closed it with code. Like a real client, it then closes its socket.
func expectClose(t *testing.T, ws *websocket.Conn, code int) *websocket.CloseError {
	t.Helper()
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(testWait))
	for {
		_, b, err := ws.ReadMessage()
		if err == nil {
			t.Logf("client discarded frame %.200s", b)
			continue
		}
		ce, ok := errors.AsType[*websocket.CloseError](err)
		if !ok {
			t.Fatalf("client read: %v, want close %d", err, code)
		}
		if ce.Code != code {
			t.Fatalf("close %d %q, want %d", ce.Code, ce.Text, code)
		}
		return ce
	}
}

// waitDone waits until c is torn down and returns how it ended.
func waitDone(t *testing.T, c *Conn) *CloseError {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(testWait):
		t.Fatal("connection not torn down")
	}
	ce, ok := context.Cause(c.Context()).(*CloseError)
	if !ok {
		t.Fatalf("context cause = %v, want *CloseError", context.Cause(c.Context()))
	}
	return ce
}

// recv receives the next frame on the server side.
func recv(t *testing.T, c *Conn) *Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	f, err := c.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v (%v)", err, context.Cause(c.Context()))
	}
	return f
}

// handshake plays hello and welcome and returns the bound session id.
func handshake(t *testing.T, ws *websocket.Conn, c *Conn) string {
	t.Helper()
	send(t, ws, helloText)
	hello := recv(t, c)
	session := NewID()
	if err := c.BindSession(session); err != nil {
		t.Fatal(err)
	}
	welcome, err := NewFrame("events.welcome", hello.MessageID, map[string]any{"session_id": session})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(welcome); err != nil {
		t.Fatal(err)
	}
	got := readFrame(t, ws)
	if got.Type != "events.welcome" || got.SessionID != session || got.ReplyTo != hello.MessageID {
		t.Fatalf("welcome = %+v", got)
	}
	return session
}
