package wsx

import (
	"context"
	"errors"
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

func TestC17_UpgradeChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(env *testEnv, r *http.Request)
		want   httpx.Code // "" means the upgrade succeeds
	}{
		{"Valid", func(*testEnv, *http.Request) {}, ""},
		{"SameOrigin", func(env *testEnv, r *http.Request) { r.Header.Set("Origin", env.srv.URL) }, ""},
		{"SameOriginOtherCase", func(env *testEnv, r *http.Request) {
			r.Header.Set("Origin", strings.ToUpper(env.srv.URL))
		}, ""},
		{"SeveralSubprotocols", func(_ *testEnv, r *http.Request) {
			r.Header.Set("Sec-WebSocket-Protocol", "chat, "+testProtocol)
		}, ""},
		{"Post", func(_ *testEnv, r *http.Request) { r.Method = http.MethodPost }, httpx.CodeMethodNotAllowed},
		{"QueryParameter", func(_ *testEnv, r *http.Request) { r.URL.RawQuery = "subscription_id=1" }, httpx.CodeInvalidArgument},
		{"CredentialInQuery", func(_ *testEnv, r *http.Request) { r.URL.RawQuery = "access_token=x" }, httpx.CodeInvalidArgument},
		{"EmptyQuery", func(_ *testEnv, r *http.Request) { r.URL.ForceQuery = true }, httpx.CodeInvalidArgument},
		{"AmpersandQuery", func(_ *testEnv, r *http.Request) { r.URL.RawQuery = "&" }, httpx.CodeInvalidArgument},
		{"CrossOrigin", func(_ *testEnv, r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, httpx.CodePermissionDenied},
		{"NullOrigin", func(_ *testEnv, r *http.Request) { r.Header.Set("Origin", "null") }, httpx.CodePermissionDenied},
		{"TwoOrigins", func(env *testEnv, r *http.Request) {
			r.Header["Origin"] = []string{env.srv.URL, "https://evil.example"}
		}, httpx.CodePermissionDenied},
		{"NoSubprotocol", func(_ *testEnv, r *http.Request) { r.Header.Del("Sec-WebSocket-Protocol") }, httpx.CodeProtocolRequired},
		{"OtherSubprotocol", func(_ *testEnv, r *http.Request) {
			r.Header.Set("Sec-WebSocket-Protocol", "orbit.workers.v1")
		}, httpx.CodeProtocolRequired},
		{"SubprotocolOtherCase", func(_ *testEnv, r *http.Request) {
			r.Header.Set("Sec-WebSocket-Protocol", strings.ToUpper(testProtocol))
		}, httpx.CodeProtocolRequired},
		{"PlainGet", func(_ *testEnv, r *http.Request) {
			r.Header.Del("Upgrade")
			r.Header.Del("Connection")
		}, httpx.CodeProtocolRequired},
		{"OldVersion", func(_ *testEnv, r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") }, httpx.CodeProtocolRequired},
		{"NoAuthorization", func(_ *testEnv, r *http.Request) { r.Header.Del("Authorization") }, httpx.CodeUnauthenticated},
		{"UnknownToken", func(_ *testEnv, r *http.Request) { r.Header.Set("Authorization", "Bearer nobody") }, httpx.CodeUnauthenticated},
		{"MissingPermission", func(_ *testEnv, r *http.Request) { r.Header.Set("Authorization", tokenReader) }, httpx.CodePermissionDenied},
		{"AuthenticationFails", func(_ *testEnv, r *http.Request) { r.Header.Set("Authorization", tokenBroken) }, httpx.CodeInternal},
		{"BadKey", func(_ *testEnv, r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "short") }, httpx.CodeInvalidArgument},

		// The order of the checks.
		{"QueryBeforeOrigin", func(_ *testEnv, r *http.Request) {
			r.URL.RawQuery = "x=1"
			r.Header.Set("Origin", "https://evil.example")
		}, httpx.CodeInvalidArgument},
		{"OriginBeforeSubprotocol", func(_ *testEnv, r *http.Request) {
			r.Header.Set("Origin", "https://evil.example")
			r.Header.Del("Sec-WebSocket-Protocol")
		}, httpx.CodePermissionDenied},
		{"SubprotocolBeforeAuthentication", func(_ *testEnv, r *http.Request) {
			r.Header.Del("Sec-WebSocket-Protocol")
			r.Header.Del("Authorization")
		}, httpx.CodeProtocolRequired},
		{"KeyBeforeAuthentication", func(_ *testEnv, r *http.Request) {
			r.Header.Set("Sec-WebSocket-Key", "short")
			r.Header.Del("Authorization")
		}, httpx.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			req := env.upgradeRequest(t)
			tt.change(env, req)
			resp, body := env.do(t, req)
			if tt.want == "" {
				if resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("status = %d, want 101; body %s", resp.StatusCode, body)
				}
				if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != testProtocol {
					t.Errorf("Sec-WebSocket-Protocol = %q, want %q", got, testProtocol)
				}
				waitDone(t, env.accept(t))
				return
			}
			checkRejected(t, resp, body, tt.want)
			switch tt.want {
			case httpx.CodeProtocolRequired:
				if resp.Header.Get("Upgrade") != "websocket" || resp.Header.Get("Sec-WebSocket-Version") != "13" {
					t.Errorf("426 headers Upgrade = %q, Sec-WebSocket-Version = %q", resp.Header.Get("Upgrade"), resp.Header.Get("Sec-WebSocket-Version"))
				}
			case httpx.CodeMethodNotAllowed:
				if got := resp.Header.Get("Allow"); got != http.MethodGet {
					t.Errorf("Allow = %q, want GET", got)
				}
			}
			if n := env.entry.openConns(); n != 0 {
				t.Errorf("%d slots taken after a refused upgrade", n)
			}
		})
	}
}

func TestC17_UpgradeResponse(t *testing.T) {
	t.Parallel()
	env := setup(t)
	d := websocket.Dialer{Subprotocols: []string{"chat", testProtocol}, EnableCompression: true, HandshakeTimeout: testWait}
	ws, resp, err := d.Dial(env.url, http.Header{"Authorization": {tokenConsumer}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	server := env.accept(t)
	if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != "" {
		t.Errorf("Sec-WebSocket-Extensions = %q, want no compression", got)
	}
	if got := ws.Subprotocol(); got != testProtocol {
		t.Errorf("sub-protocol = %q, want %q", got, testProtocol)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) > 0 {
		t.Errorf("Set-Cookie = %q", got)
	}
	if id := resp.Header.Get("X-Request-ID"); !httpx.ValidID(id) {
		t.Errorf("X-Request-ID = %q", id)
	}
	if p := server.Principal(); p == nil || !p.Can("events:consume") {
		t.Errorf("Principal = %+v", p)
	}
	// A compressed frame would be refused by the server: send one frame
	// and get it back uncompressed.
	send(t, ws, helloText)
	if f := recv(t, server); f.Type != "events.hello" {
		t.Errorf("frame = %+v", f)
	}
}

func TestE6_ConnectionLimit(t *testing.T) {
	t.Parallel()
	env := setup(t, func(c *Config) { c.MaxConns = 2 })
	first, firstServer := env.dial(t)
	env.dial(t)

	resp, body := env.do(t, env.upgradeRequest(t))
	checkRejected(t, resp, body, httpx.CodeCapacityExceeded)
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}

	// Checks the client can fix come before the limit.
	req := env.upgradeRequest(t)
	req.Header.Del("Authorization")
	resp, body = env.do(t, req)
	checkRejected(t, resp, body, httpx.CodeUnauthenticated)
	req = env.upgradeRequest(t)
	req.Header.Set("Authorization", tokenReader)
	resp, body = env.do(t, req)
	checkRejected(t, resp, body, httpx.CodePermissionDenied)

	// A closed connection frees its slot once it is torn down.
	_ = first.Close()
	waitDone(t, firstServer)
	env.dial(t)
	resp, body = env.do(t, env.upgradeRequest(t))
	checkRejected(t, resp, body, httpx.CodeCapacityExceeded)
}

func TestE6_LimitIsPerEntry(t *testing.T) {
	t.Parallel()
	events := setup(t, func(c *Config) { c.MaxConns = 1 })
	workers := setup(t, func(c *Config) { c.MaxConns = 1 })
	events.dial(t)
	workers.dial(t)
	resp, body := events.do(t, events.upgradeRequest(t))
	checkRejected(t, resp, body, httpx.CodeCapacityExceeded)
}

func TestE16_ShutdownClosesConnections(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a, aServer := env.dial(t)
	b, _ := env.dial(t)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		done <- env.entry.Shutdown(ctx)
	}()
	expectClose(t, a, CloseGoingAway)
	expectClose(t, b, CloseGoingAway)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if ce := waitDone(t, aServer); ce.Code != CloseGoingAway || ce.ByPeer {
		t.Errorf("close = %+v", ce)
	}
	resp, body := env.do(t, env.upgradeRequest(t))
	checkRejected(t, resp, body, httpx.CodeUnavailable)
}

func TestShutdownBoundedByContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	env := setup(t, func(c *Config) {
		c.WriteTimeout = testWait
		c.hooks.beforeWrite = func() { <-release }
	})
	ws, server := env.dial(t)
	f, _ := NewFrame("events.ping", "", map[string]any{})
	if err := server.Send(f); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := env.entry.Shutdown(ctx); err == nil {
		t.Error("Shutdown returned nil while a connection was stuck")
	}
	close(release)
	readFrame(t, ws)
	expectClose(t, ws, CloseGoingAway)
	waitDone(t, server)
}

// unconsulted is an auth.Authenticator that fails, other than
// unauthenticated, whenever it is consulted.
type unconsulted struct{}

func (unconsulted) Authenticate(context.Context, string) (*auth.Principal, error) {
	return nil, errors.New("authenticator consulted")
}

func (unconsulted) CheckGrants(context.Context, auth.Querier, []auth.Grant) ([]error, error) {
	return nil, errors.New("authenticator consulted")
}

func TestC1_FromAuthenticator(t *testing.T) {
	t.Parallel()
	// These requests are refused before the database is consulted.
	authenticate := FromAuthenticator(unconsulted{})
	for name, values := range map[string][]string{
		"None":     nil,
		"Two":      {"Bearer a", "Bearer b"},
		"Basic":    {"Basic YTpi"},
		"NoToken":  {"Bearer "},
		"BadChars": {"Bearer a b"},
	} {
		r := httptest.NewRequest(http.MethodGet, testPath, nil)
		r.Header["Authorization"] = values
		if p, err := authenticate(r); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: authenticate = %+v, %v; want ErrUnauthenticated", name, p, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := NewEntry(Config{MaxConns: -1, WriteTimeout: -time.Second})
	if err == nil {
		t.Fatal("NewEntry accepted an empty config")
	}
	for _, want := range []string{"Subprotocol", "Permission", "Authenticate", "MaxConns", "WriteTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	e, err := NewEntry(Config{Subprotocol: testProtocol, Permission: "events:consume", Authenticate: testAuthenticate})
	if err != nil {
		t.Fatal(err)
	}
	c := e.cfg
	if c.MaxConns != 128 || c.InboundQueue != 4 || c.OutboundQueue != 8 || c.WriteTimeout != 5*time.Second ||
		c.IdleTimeout != 60*time.Second || c.HelloTimeout != 5*time.Second {
		t.Errorf("defaults = %+v", c)
	}
}

// The read deadline that bounds an HTTP request's body (httpx.Middleware)
// must not end the WebSocket connection the request became.
func TestC12_UpgradedConnectionOutlivesRequestDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 100 * time.Millisecond
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	entry, err := NewEntry(Config{Subprotocol: testProtocol, Permission: auth.PermEventsConsume, Authenticate: testAuthenticate, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *Conn, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := entry.Upgrade(w, r); err == nil {
			conns <- c
		}
	})
	srv := httptest.NewServer(httpx.Middleware(httpx.MiddlewareOptions{Logger: logger, Deadline: deadline}, httpx.NoDeadline(handler)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		_ = entry.Shutdown(ctx)
		srv.Close()
	})
	d := websocket.Dialer{Subprotocols: []string{testProtocol}, HandshakeTimeout: testWait}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+testPath, http.Header{"Authorization": {tokenConsumer}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	server := <-conns
	// Past the deadline and the one second of grace for the body.
	time.Sleep(deadline + 1500*time.Millisecond)
	send(t, ws, helloText)
	if f := recv(t, server); f.Type != "events.hello" {
		t.Fatalf("got %s", f.Type)
	}
}
