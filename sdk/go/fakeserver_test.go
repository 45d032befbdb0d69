package orbit

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// waitTime bounds every wait of a test for something the client does.
const waitTime = 5 * time.Second

// fakeServer is a fake orbit.workers.v1 or orbit.events.v1 server. Each
// accepted connection is handed to the test, which plays the server's side
// frame by frame.
type fakeServer struct {
	t     *testing.T
	srv   *httptest.Server
	conns chan *fakeConn
	proto fakeProtocol

	mu       sync.Mutex
	attempts []time.Time   // when each upgrade request arrived
	headers  []http.Header // the headers of each upgrade request
	reject   func(n int) (status int, body string, header http.Header)
	all      []*fakeConn
}

// fakeProtocol is what distinguishes the two protocols for the fake.
type fakeProtocol struct {
	path        string // of the upgrade request
	subprotocol string
	ping        string // the client's heartbeat frame type
}

var (
	workerFake = fakeProtocol{path: "/v1/workers/connect", subprotocol: workerProtocol, ping: framePing}
	eventsFake = fakeProtocol{path: "/v1/events/connect", subprotocol: eventsProtocol, ping: frameEventsPing}
)

// setupServer starts a fake worker server. reject, if not nil, is asked
// about the n-th upgrade request (from 1) and refuses it when it returns a
// status.
func setupServer(t *testing.T, reject func(n int) (int, string, http.Header)) *fakeServer {
	t.Helper()
	return setupFake(t, workerFake, reject)
}

// setupFake starts a fake server of protocol p; reject is as for
// setupServer.
func setupFake(t *testing.T, p fakeProtocol, reject func(n int) (int, string, http.Header)) *fakeServer {
	t.Helper()
	s := &fakeServer{t: t, conns: make(chan *fakeConn, 8), reject: reject, proto: p}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.mu.Lock()
		all := s.all
		s.mu.Unlock()
		for _, c := range all {
			c.drop()
		}
		s.srv.Close()
	})
	return s
}

func (s *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.attempts = append(s.attempts, time.Now())
	s.headers = append(s.headers, r.Header.Clone())
	n := len(s.attempts)
	s.mu.Unlock()
	if r.URL.Path != s.proto.path || r.URL.RawQuery != "" || r.URL.ForceQuery {
		http.Error(w, "bad path or query", http.StatusTeapot)
		return
	}
	if s.reject != nil {
		if status, body, header := s.reject(n); status != 0 {
			for k, v := range header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
	}
	up := websocket.Upgrader{Subprotocols: []string{s.proto.subprotocol}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &fakeConn{t: s.t, ws: ws, ping: s.proto.ping, frames: make(chan frame, 64), closed: make(chan struct{})}
	s.mu.Lock()
	s.all = append(s.all, c)
	s.mu.Unlock()
	go c.read()
	s.conns <- c
}

// accept returns the next connection the client opens.
func (s *fakeServer) accept() *fakeConn {
	s.t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(waitTime):
		s.t.Fatal("the client did not connect")
		return nil
	}
}

// attemptTimes returns when each upgrade request arrived.
func (s *fakeServer) attemptTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...)
}

// header returns the headers of the n-th upgrade request (from 0).
func (s *fakeServer) header(n int) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers[n]
}

// fakeConn is the server's side of one client connection.
type fakeConn struct {
	t      *testing.T
	ws     *websocket.Conn
	ping   string     // the heartbeat frame type, which next skips
	frames chan frame // frames from the client
	closed chan struct{}
	// closeCode is the close code the client sent, or 0; read it after
	// closed is closed.
	closeCode int
}

func (c *fakeConn) read() {
	defer close(c.closed)
	for {
		typ, b, err := c.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.closeCode = ce.Code
			}
			_ = c.ws.Close()
			return
		}
		if typ != websocket.TextMessage {
			c.t.Errorf("client sent a binary frame")
			continue
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			c.t.Errorf("client sent an invalid frame %s: %v", b, err)
			continue
		}
		select {
		case c.frames <- f:
		default:
			if f.Type != c.ping {
				c.t.Errorf("frame buffer full; dropped a %s frame", f.Type)
			}
		}
	}
}

// next returns the next frame of the client other than its heartbeat.
func (c *fakeConn) next() frame {
	c.t.Helper()
	for {
		f := c.nextAny()
		if f.Type != c.ping {
			return f
		}
	}
}

// nextAny returns the next frame of the client.
func (c *fakeConn) nextAny() frame {
	c.t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-c.closed:
		c.t.Fatal("the connection closed while a frame was expected")
	case <-time.After(waitTime):
		c.t.Fatal("no frame from the client")
	}
	return frame{}
}

// expect returns the next frame other than a heartbeat and checks its type.
func (c *fakeConn) expect(typ string) frame {
	c.t.Helper()
	f := c.next()
	if f.Type != typ {
		c.t.Fatalf("frame type = %q, want %q (body %s)", f.Type, typ, f.Body)
	}
	return f
}

// send writes a server frame.
func (c *fakeConn) send(typ, replyTo, sessionID string, body any) {
	c.t.Helper()
	f := frame{ProtocolVersion: protocolVersion, Type: typ, MessageID: newMessageID(), SessionID: sessionID, ReplyTo: replyTo}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		f.Body = b
	}
	c.sendFrame(f)
}

// sendError writes an error frame.
func (c *fakeConn) sendError(replyTo, sessionID, code string) {
	c.t.Helper()
	c.sendFrame(frame{ProtocolVersion: protocolVersion, Type: frameTypeError, MessageID: newMessageID(),
		SessionID: sessionID, ReplyTo: replyTo, Error: &frameErr{Code: code, Message: "test says " + code}})
}

func (c *fakeConn) sendFrame(f frame) {
	c.t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatalf("write %s: %v", f.Type, err)
	}
}

// handshake reads the worker's hello and answers with a welcome for
// session sessionID and heartbeat hb. It returns the hello.
func (c *fakeConn) handshake(sessionID string, hb time.Duration) frame {
	c.t.Helper()
	hello := c.expect(frameHello)
	c.send(frameWelcome, hello.MessageID, sessionID, welcomeBody{
		SessionID: sessionID, QueueID: testQueueID, Capacity: 1, LeaseDurationMS: 30000,
		HeartbeatIntervalMS: hb.Milliseconds(), ServerTime: time.Now().UTC(),
	})
	return hello
}

// assign sends a task.assign for task id with attempt attemptID.
func (c *fakeConn) assign(sessionID, id, attemptID string, epoch uint64, input string) {
	c.t.Helper()
	var a assignBody
	a.Task.ID, a.Task.QueueID, a.Task.Revision = id, testQueueID, 2
	a.Task.Input, a.Task.Attempts, a.Task.MaxAttempts, a.Task.Idempotent = json.RawMessage(input), 1, 3, false
	a.AttemptID, a.Epoch, a.LeaseUntil, a.LeaseSecret = attemptID, epoch, time.Date(2026, 9, 17, 10, 0, 30, 0, time.UTC), "secret-"+attemptID
	c.send(frameAssign, "", sessionID, a)
}

// drop closes the connection without a close frame, as a network failure
// would.
func (c *fakeConn) drop() {
	_ = c.ws.UnderlyingConn().Close()
	<-c.closed
}

// waitClosed waits for the client to close the connection and returns the
// close code it sent.
func (c *fakeConn) waitClosed() int {
	c.t.Helper()
	for {
		select {
		case f := <-c.frames:
			if f.Type != c.ping {
				c.t.Errorf("unexpected %s frame while waiting for the close (body %s)", f.Type, f.Body)
			}
		case <-c.closed:
			return c.closeCode
		case <-time.After(waitTime):
			c.t.Fatal("the client did not close the connection")
			return 0
		}
	}
}

// idOf returns a 32-hex id made of one repeated character.
func idOf(ch string) string { return strings.Repeat(ch, 32) }

// discardLogger drops the client's log.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// validID reports whether s is 32 lowercase hexadecimal characters.
func validID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
