package server_test

// Abusive clients (F-5): slow headers, floods of pings and of invalid
// frames, and many connections opened and closed. The other F-5 cases
// live next to what they test: bodies over the limit (C-8), the slow body
// and the connection bound (connections_test.go), the never-reading
// WebSocket client (internal/wsx), the 128-consumer soak (`make soak`).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// eventsProtocol is the sub-protocol of the event entry.
const eventsProtocol = "orbit.events.v1"

// eventsURL is srv's event entry.
func eventsURL(srv *servertest.Server) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/events/connect"
}

// eventConsumer creates a subscription of a new credential and returns a
// raw event connection welcomed on it.
func eventConsumer(t *testing.T, srv *servertest.Server) *wstest.Client {
	t.Helper()
	cred := srv.Credential(t, servertest.CredentialParams{
		Queue:       "q-" + strings.ToLower(rand8()),
		Permissions: []string{auth.PermEventsManage, auth.PermEventsConsume, auth.PermEventsRead},
	})
	body := fmt.Sprintf(`{"name":"s-%s","queue_id":%q}`, strings.ToLower(rand8()), cred.QueueID)
	r := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions", Token: cred.Token, IdempotencyKey: "abuse-" + rand8(), Body: body})
	if r.Status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Subscription struct {
			ID string `json:"id"`
		} `json:"subscription"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	c := wstest.Dial(t, wstest.Options{URL: eventsURL(srv), Subprotocol: eventsProtocol, Token: cred.Token, Timeout: connBound})
	hello := c.NewFrame("events.hello", map[string]any{"subscription_id": receipt.Subscription.ID, "capacity": 1})
	c.SendFrame(hello)
	welcome := c.Reply(hello.MessageID)
	var w struct {
		SessionID string `json:"session_id"`
	}
	if welcome.Type != "events.welcome" || welcome.DecodeBody(&w) != nil {
		t.Fatalf("answer to hello: %s", welcome)
	}
	c.SetSession(w.SessionID)
	return c
}

func rand8() string { return wstest.NewID()[:8] }

// pingWithin sends a ping on c and fails the test unless its answer comes
// within limit.
func pingWithin(t *testing.T, c *wstest.Client, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	id := c.Send("events.ping", struct{}{})
	f, err := c.TryWait(limit, func(f *wstest.Frame) bool { return f.ReplyTo == id })
	if err != nil {
		t.Fatalf("a ping on a quiet connection was not answered within %s: %v", limit, err)
	}
	if f.Type != "ack" {
		t.Fatalf("answer to a ping: %s", f)
	}
	return time.Since(start)
}

// F-5: the server reads a connection's frames only as fast as it handles
// them (events.read_queue), so a client that sends a thousand pings at
// once gets every answer, in order, at the server's pace, and keeps its
// connection: pings are valid frames. Another connection's pings are
// answered meanwhile within 5 s, a behaviour bound far above the usual milliseconds.
func TestF5_PingFloodLeavesOtherConnectionsAlone(t *testing.T) {
	t.Parallel()
	const flood = 1000
	srv := servertest.Start(t)
	flooder, quiet := eventConsumer(t, srv), eventConsumer(t, srv)

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for range flood {
			if _, err := flooder.TrySend("events.ping", struct{}{}); err != nil {
				return
			}
		}
	}()
	var slowest time.Duration
	for range 10 {
		slowest = max(slowest, pingWithin(t, quiet, connBound/3))
	}
	<-sent
	answered := 0
	for {
		f, err := flooder.TryWait(connBound, func(f *wstest.Frame) bool { return f.ReplyTo != "" })
		if err != nil {
			break
		}
		if f.Type != "ack" {
			t.Fatalf("answer %d to the flood: %s", answered, f)
		}
		answered++
		if answered == flood {
			break
		}
	}
	if answered != flood {
		t.Fatalf("%d of %d flooded pings answered", answered, flood)
	}
	if closed, err := flooder.Closed(); closed {
		t.Fatalf("the flooding connection was closed: %v", err)
	}
	pingWithin(t, flooder, connBound/3)
	t.Logf("%d pings answered; the other connection's slowest ping %s", flood, slowest.Round(time.Millisecond))
}

// F-5: fifty connections that flood invalid frames (not an envelope) are
// each closed with 1008, the documented code for an invalid envelope, at
// the first one; a welcomed connection beside them keeps its pings
// answered and stays open.
func TestF5_InvalidFrameFloodClosed1008(t *testing.T) {
	t.Parallel()
	const flooders = 50
	srv := servertest.Start(t)
	quiet := eventConsumer(t, srv)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermEventsConsume}})

	var wg sync.WaitGroup
	codes := make(chan int, flooders)
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- floodInvalid(eventsURL(srv), cred.Token)
		}()
	}
	stop := make(chan struct{})
	pinged := make(chan time.Duration, 1)
	go func() {
		var slowest time.Duration
		defer func() { pinged <- slowest }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			id, err := quiet.TrySend("events.ping", struct{}{})
			if err != nil {
				return
			}
			if _, err := quiet.TryWait(connBound, func(f *wstest.Frame) bool { return f.ReplyTo == id }); err != nil {
				return
			}
			slowest = max(slowest, time.Since(start))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(stop)
	slowest := <-pinged
	close(codes)
	for code := range codes {
		if code != websocket.ClosePolicyViolation {
			t.Errorf("a flooding connection ended with %d, want 1008", code)
		}
	}
	if slowest > connBound/3 {
		t.Errorf("the quiet connection's slowest ping took %s during the flood", slowest)
	}
	if closed, err := quiet.Closed(); closed {
		t.Fatalf("the quiet connection was closed: %v", err)
	}
	pingWithin(t, quiet, connBound/3)
	t.Logf("%d flooders closed with 1008; the quiet connection's slowest ping %s", flooders, slowest.Round(time.Millisecond))
}

// floodInvalid opens an event connection and writes frames that are not
// an envelope until the server closes it; it returns the close code, or
// -1 when the connection ended without one.
func floodInvalid(url, token string) int {
	d := websocket.Dialer{Subprotocols: []string{eventsProtocol}, HandshakeTimeout: connBound}
	ws, _, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		return -1
	}
	defer ws.Close()
	read := make(chan int, 1)
	go func() {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					read <- ce.Code
				} else {
					read <- -1
				}
				return
			}
		}
	}()
	deadline := time.Now().Add(connBound)
	for i := 0; time.Now().Before(deadline); i++ {
		_ = ws.SetWriteDeadline(deadline)
		if err := ws.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"garbage": %d`, i))); err != nil {
			break
		}
		select {
		case code := <-read:
			return code
		default:
		}
	}
	select {
	case code := <-read:
		return code
	case <-time.After(connBound):
		return -1
	}
}

// F-5: a client that sends its request headers a line every half second
// never completes them; the server closes the connection once the header
// timeout (10 s) has passed, and serves another connection meanwhile.
func TestF5_SlowHeadersClosedByReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	conn := dialServer(t, srv)
	start := time.Now()
	if _, err := fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: orbit\r\n"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Duration, 1)
	go func() {
		_ = conn.SetReadDeadline(start.Add(2 * connBound))
		_, _ = io.Copy(io.Discard, conn)
		closed <- time.Since(start)
	}()
	drip := time.NewTicker(500 * time.Millisecond)
	defer drip.Stop()
	served := false
	for i := 0; ; i++ {
		select {
		case took := <-closed:
			if took < 9*time.Second || took > 2*connBound-time.Second {
				t.Fatalf("the slow client was closed after %s, want about the 10 s header timeout", took)
			}
			if !served {
				t.Fatal("no other request was served while the headers dripped")
			}
			t.Logf("closed %s after the request line", took.Round(100*time.Millisecond))
			return
		case <-drip.C:
			_, _ = fmt.Fprintf(conn, "X-Slow-%d: 1\r\n", i)
			if !served {
				resp, err := http.Get(srv.URL + "/healthz")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				served = resp.StatusCode == http.StatusOK
			}
		}
	}
}

// F-5: 10,000 connections opened and closed (HTTP requests on a fresh
// connection each, and WebSocket upgrades closed before their hello)
// leave no goroutine behind: once they are gone the process is back to
// its baseline. It does not run in parallel, so that the count is this
// test's own.
func TestF5_ConnectionChurnLeavesNoGoroutines(t *testing.T) {
	const (
		cycles     = 10_000
		upgradeOne = 100 // every 100th cycle is a WebSocket upgrade
		loops      = 8
	)
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermEventsConsume}})
	addr := strings.TrimPrefix(srv.URL, "http://")
	cycle := func(i int) error {
		if i%upgradeOne == 0 {
			d := websocket.Dialer{Subprotocols: []string{eventsProtocol}, HandshakeTimeout: connBound}
			ws, _, err := d.Dial(eventsURL(srv), http.Header{"Authorization": {"Bearer " + cred.Token}})
			if err != nil {
				return err
			}
			return ws.Close()
		}
		conn, err := net.DialTimeout("tcp", addr, connBound)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(connBound))
		if _, err := fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: orbit\r\nConnection: close\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %d", resp.StatusCode)
		}
		return nil
	}
	_ = cycle(1) // warm up: the first request starts what stays
	baseline := settledGoroutines(0)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, loops)
	for l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := l; i < cycles; i += loops {
				if err := cycle(i); err != nil {
					errs <- fmt.Errorf("cycle %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	after := settledGoroutines(baseline)
	if after > baseline+2 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		os.Stderr.Write(buf[:n])
		t.Fatalf("goroutines: %d before %d connection cycles, %d after", baseline, cycles, after)
	}
	t.Logf("%d cycles in %s; goroutines %d before, %d after", cycles, took.Round(time.Millisecond), baseline, after)
}

// settledGoroutines waits, up to connBound, for the goroutine count to
// fall to target (or, with target 0, to stop changing) and returns it.
func settledGoroutines(target int) int {
	deadline := time.Now().Add(connBound)
	last := goroutines()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		n := goroutines()
		if (target > 0 && n <= target) || (target == 0 && n == last) {
			return n
		}
		last = n
	}
	return last
}

// goroutines counts the process's goroutines but those of the database
// pools' open connections (one watcher each), whose number follows the
// pool's size, not the connections of clients.
func goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "mysqlConn).startWatcher") {
			count++
		}
	}
	return count
}
