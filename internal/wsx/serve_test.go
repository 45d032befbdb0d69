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

// fakeSession records what Serve does with a session.
type fakeSession struct {
	c *Conn
	// handled receives the type of every frame Handle gets; a frame of
	// type "test.stop" makes Handle return false.
	handled chan string
	// dispatching is closed when Dispatch starts, dispatched when it
	// returns.
	dispatching, dispatched chan struct{}
	// ended is closed when End starts; End then waits for release.
	ended   chan struct{}
	release chan struct{}
	// endAfterDispatch is whether Dispatch had returned when End started.
	endAfterDispatch bool
}

func newFakeSession(c *Conn) *fakeSession {
	return &fakeSession{
		c: c, handled: make(chan string, 8),
		dispatching: make(chan struct{}), dispatched: make(chan struct{}),
		ended: make(chan struct{}), release: make(chan struct{}),
	}
}

func (s *fakeSession) Handle(f *Frame) bool {
	s.handled <- f.Type
	if f.Type == "test.stop" {
		return false
	}
	s.c.Reply(f, "ack", map[string]string{"type": f.Type})
	return true
}

func (s *fakeSession) Dispatch() {
	close(s.dispatching)
	<-s.c.Context().Done()
	close(s.dispatched)
}

func (s *fakeSession) End() {
	select {
	case <-s.dispatched:
		s.endAfterDispatch = true
	default:
	}
	close(s.ended)
	<-s.release
}

// serveEnv is a server whose entry serves connections with open.
type serveEnv struct {
	entry *Entry
	url   string
}

func setupServe(t *testing.T, open OpenFunc) *serveEnv {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	entry, err := NewEntry(Config{
		Subprotocol: testProtocol, Permission: auth.PermEventsConsume,
		Authenticate: testAuthenticate, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entry.Serve(w, r, "events.hello", open)
	})
	srv := httptest.NewServer(httpx.Middleware(httpx.MiddlewareOptions{Logger: logger}, httpx.NoDeadline(handler)))
	t.Cleanup(srv.Close)
	return &serveEnv{entry: entry, url: "ws" + strings.TrimPrefix(srv.URL, "http") + testPath}
}

func (env *serveEnv) dial(t *testing.T) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{testProtocol}, HandshakeTimeout: testWait}
	ws, _, err := d.Dial(env.url, http.Header{"Authorization": {tokenConsumer}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

func (env *serveEnv) shutdown(t *testing.T, wait time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return env.entry.Shutdown(ctx)
}

func TestServeRefusesAHelloOfAnotherType(t *testing.T) {
	t.Parallel()
	env := setupServe(t, func(*Conn, *Frame, *http.Request) (Session, error) {
		t.Error("open called for a frame that is not a hello")
		return nil, nil
	})
	ws := env.dial(t)
	send(t, ws, pingText(""))
	f := readFrame(t, ws)
	if f.Error == nil || f.Error.Code != httpx.CodeInvalidArgument ||
		f.Error.Message != "the first frame must be events.hello without reply_to or error" {
		t.Errorf("reply = %+v, error %+v", f, f.Error)
	}
	if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != "hello refused" {
		t.Errorf("close reason = %q", ce.Text)
	}
}

func TestServeRefusesWithTheOpenError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		code int
	}{
		{"Invalid", httpx.Errorf(httpx.CodeInvalidArgument, "body.capacity must be between 1 and 32"), ClosePolicyViolation},
		{"NotFound", httpx.Errorf(httpx.CodeNotFound, "subscription not found"), ClosePolicyViolation},
		{"Unavailable", httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; reconnect"), CloseInternalError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := setupServe(t, func(*Conn, *Frame, *http.Request) (Session, error) { return nil, tc.err })
			ws := env.dial(t)
			send(t, ws, helloText)
			f := readFrame(t, ws)
			var he *httpx.Error
			errors.As(tc.err, &he)
			if f.ReplyTo != idA || f.Error == nil || f.Error.Code != he.Code || f.Error.Message != he.Message {
				t.Errorf("reply = %+v, error %+v", f, f.Error)
			}
			expectClose(t, ws, tc.code)
		})
	}
}

func TestServeDrivesTheSession(t *testing.T) {
	t.Parallel()
	sessions := make(chan *fakeSession, 1)
	env := setupServe(t, func(c *Conn, f *Frame, r *http.Request) (Session, error) {
		if r.Header.Get("Authorization") != tokenConsumer {
			t.Errorf("open got request without its Authorization")
		}
		if err := c.Welcome(NewID(), f, "events.welcome", map[string]any{}); err != nil {
			return nil, nil
		}
		s := newFakeSession(c)
		sessions <- s
		return s, nil
	})
	ws := env.dial(t)
	send(t, ws, helloText)
	w := readFrame(t, ws)
	if w.Type != "events.welcome" || w.ReplyTo != idA || w.SessionID == "" {
		t.Fatalf("welcome = %+v", w)
	}
	s := <-sessions
	defer func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
	}()
	<-s.dispatching
	send(t, ws, pingText(w.SessionID))
	if typ := <-s.handled; typ != "events.ping" {
		t.Errorf("handled %q", typ)
	}
	if r := readFrame(t, ws); r.Type != "ack" || r.ReplyTo == "" {
		t.Errorf("reply = %+v", r)
	}

	// A Handle that returns false ends the connection; Shutdown waits for
	// End, which runs after Dispatch.
	send(t, ws, `{"protocol_version":"1","type":"test.stop","message_id":"`+NewID()+`","session_id":"`+w.SessionID+`","body":{}}`)
	expectClose(t, ws, CloseNormal)
	<-s.ended
	if !s.endAfterDispatch {
		t.Error("End ran before Dispatch returned")
	}
	if err := env.shutdown(t, 50*time.Millisecond); err == nil {
		t.Error("Shutdown returned nil while End was running")
	}
	close(s.release)
	if err := env.shutdown(t, testWait); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestServeAfterShutdownIsUnavailable(t *testing.T) {
	t.Parallel()
	env := setupServe(t, func(*Conn, *Frame, *http.Request) (Session, error) {
		t.Error("open called while draining")
		return nil, nil
	})
	if err := env.shutdown(t, testWait); err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{Subprotocols: []string{testProtocol}, HandshakeTimeout: testWait}
	_, resp, err := d.Dial(env.url, http.Header{"Authorization": {tokenConsumer}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after shutdown: %v, %+v", err, resp)
	}
}

func TestUnavailableAndFail(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, c := env.dial(t)
	c.Unavailable("", "the session could not be recorded; reconnect", "open session", errors.New("boom"))
	f := readFrame(t, ws)
	if f.Error == nil || f.Error.Code != httpx.CodeUnavailable || f.Error.Message != "the session could not be recorded; reconnect" {
		t.Errorf("frame = %+v, error %+v", f, f.Error)
	}
	if ce := expectClose(t, ws, CloseInternalError); ce.Text != "unavailable" {
		t.Errorf("close reason = %q", ce.Text)
	}
}

func TestRefusalCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{httpx.Errorf(httpx.CodeUnavailable, "x"), CloseInternalError},
		{httpx.Errorf(httpx.CodeCapacityExceeded, "x"), CloseTryAgainLater},
		{httpx.Errorf(httpx.CodePermissionDenied, "x"), ClosePolicyViolation},
		{auth.ErrUnauthenticated, ClosePolicyViolation},
		{errors.New("plain"), ClosePolicyViolation},
	} {
		if got := RefusalCode(tc.err); got != tc.want {
			t.Errorf("RefusalCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestCheckHello(t *testing.T) {
	t.Parallel()
	id, bad, one, zero, many := idA, "A", 1, 0, 33
	for _, tc := range []struct {
		name     string
		id       *string
		capacity *int
		want     string // "" for no error
	}{
		{"Valid", &id, &one, ""},
		{"NoID", nil, &one, "body.queue_id"},
		{"NoCapacity", &id, nil, "body.capacity"},
		{"CapacityZero", &id, &zero, "body.capacity must be between 1 and 32"},
		{"CapacityTooLarge", &id, &many, "body.capacity must be between 1 and 32"},
		{"BadID", &bad, &one, "body.queue_id must be 32 lowercase hex characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckHello("queue_id", tc.id, tc.capacity, 32)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckHello: %v", err)
				}
				return
			}
			var he *httpx.Error
			if !errors.As(err, &he) || he.Code != httpx.CodeInvalidArgument || !strings.Contains(he.Message, tc.want) {
				t.Fatalf("CheckHello = %v, want INVALID_ARGUMENT with %q", err, tc.want)
			}
		})
	}
}

func TestSendLeaseGivesBackWhatIsNotSent(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, c := env.dial(t)
	unsent := make(chan error, 1)
	if !c.SendLease("event.deliver", map[string]string{"id": idB}, func(err error) { unsent <- err }) {
		t.Fatal("SendLease on an open connection returned false")
	}
	if f := readFrame(t, ws); f.Type != "event.deliver" || f.ReplyTo != "" {
		t.Errorf("frame = %+v", f)
	}
	select {
	case err := <-unsent:
		t.Fatalf("unsent called after a frame was sent: %v", err)
	default:
	}

	// A body that cannot be encoded is not sent; the connection stays.
	if !c.SendLease("event.deliver", func() {}, func(err error) { unsent <- err }) {
		t.Error("SendLease returned false for a frame that could not be encoded")
	}
	if err := <-unsent; err == nil {
		t.Error("unsent called without a cause")
	}

	c.Close(CloseNormal, "")
	if c.SendLease("event.deliver", map[string]string{}, func(err error) { unsent <- err }) {
		t.Error("SendLease on a closing connection returned true")
	}
	if err := <-unsent; !errors.Is(err, ErrClosed) {
		t.Errorf("cause = %v, want ErrClosed", err)
	}

	gaveBack := make(chan bool, 1)
	c.Unsent("event.deliver", ErrClosed, func(ctx context.Context) error {
		// The connection's context has ended; the give-back's has not.
		gaveBack <- ctx.Err() == nil
		return errors.New("database down")
	}, "delivery_id", idB)
	if !<-gaveBack {
		t.Error("giveBack ran with an ended context")
	}
}

func TestEntryStop(t *testing.T) {
	t.Parallel()
	var never *Entry
	if err := never.Stop(context.Background(), func(context.Context) error {
		t.Error("wait called for an entry never provisioned")
		return nil
	}); err != nil {
		t.Errorf("Stop of a nil Entry: %v", err)
	}
	env := setup(t)
	waited := false
	err := env.entry.Stop(context.Background(), func(context.Context) error {
		waited = true
		return context.DeadlineExceeded
	})
	if !waited || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v (waited %v), want the wait's error", err, waited)
	}
}
