package server_test

// Connection-level protection of a node (C-12, F-5): request bodies within
// the deadline, idle keep-alive connections closed, open connections
// bounded.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/workers"
)

// connBound bounds every wait of these tests. It is a behaviour bound, far
// above the timeouts the tests configure, not a speed target.
const connBound = 15 * time.Second

func serverConfig(change func(*config.Server)) servertest.Option {
	return func(cfg *config.Config, _ modules.Instances) { change(&cfg.Server) }
}

// dialServer opens a raw TCP connection to srv.
func dialServer(t *testing.T, srv *servertest.Server) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "http://"), connBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// readResponse reads one response from br by the deadline and decodes its
// envelope.
func readResponse(t *testing.T, conn net.Conn, br *bufio.Reader, deadline time.Time) *servertest.Response {
	t.Helper()
	_ = conn.SetReadDeadline(deadline)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("response body: %v", err)
	}
	out := &servertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if err := httpx.DecodeJSONBytes(raw, out); err != nil {
		t.Fatalf("reply is not an envelope: %v: %s", err, raw)
	}
	return out
}

// expectClosed waits until the server closes conn.
func expectClosed(t *testing.T, conn net.Conn, br *bufio.Reader, deadline time.Time) {
	t.Helper()
	_ = conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, br)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server kept the connection open")
	}
}

func TestC12_SlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	srv, cred := setup(t, serverConfig(func(s *config.Server) { s.RequestDeadline = deadline }))
	tests := []struct {
		name  string
		token string
		want  httpx.Code
	}{
		// The handler waits for the body: it gets the C-12 answer.
		{"Authenticated", cred.Token, httpx.CodeUnavailable},
		// Refused before the body is read; the server's discarding of
		// the rest of the body must not hold the connection either.
		{"Unauthenticated", "", httpx.CodeUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialServer(t, srv)
			auth := ""
			if tt.token != "" {
				auth = "Authorization: Bearer " + tt.token + "\r\n"
			}
			start := time.Now()
			_, err := fmt.Fprintf(conn, "POST /v1/test-widgets HTTP/1.1\r\nHost: orbit\r\n%s"+
				"Content-Type: application/json\r\nIdempotency-Key: slow-%s\r\nContent-Length: 1000\r\n\r\n{",
				auth, tt.name)
			if err != nil {
				t.Fatal(err)
			}
			// One byte of JSON whitespace every 200 ms: the body would
			// take more than three minutes.
			stop := make(chan struct{})
			dripped := make(chan struct{})
			go func() {
				defer close(dripped)
				for {
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Millisecond):
					}
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			defer func() {
				close(stop)
				<-dripped
			}()
			br := bufio.NewReader(conn)
			resp := readResponse(t, conn, br, start.Add(connBound))
			wantError(t, resp, tt.want.Status(), tt.want)
			expectClosed(t, conn, br, start.Add(connBound))
			t.Logf("answered %d and closed %s after the headers", resp.Status, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

func TestC12_IdleKeepAliveClosed(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	srv := servertest.Start(t, serverConfig(func(s *config.Server) { s.IdleTimeout = idle }))
	conn := dialServer(t, srv)
	br := bufio.NewReader(conn)
	// Keep-alive works: two requests on one connection.
	for range 2 {
		if _, err := fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: orbit\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if resp := readResponse(t, conn, br, time.Now().Add(connBound)); resp.Status != http.StatusOK {
			t.Fatalf("healthz: %d %s", resp.Status, resp.Body)
		}
	}
	start := time.Now()
	expectClosed(t, conn, br, start.Add(connBound))
	t.Logf("idle connection closed after %s", time.Since(start).Round(100*time.Millisecond))
}

func TestC12_ConnectionLimit(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, serverConfig(func(s *config.Server) { s.MaxConnections = 2 }))
	get := func(conn net.Conn) {
		t.Helper()
		if _, err := fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: orbit\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	held := []net.Conn{dialServer(t, srv), dialServer(t, srv)}
	for _, conn := range held {
		get(conn)
		if resp := readResponse(t, conn, bufio.NewReader(conn), time.Now().Add(connBound)); resp.Status != http.StatusOK {
			t.Fatalf("healthz: %d %s", resp.Status, resp.Body)
		}
	}
	// A third connection waits to be accepted while both are open.
	third := dialServer(t, srv)
	get(third)
	_ = third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection over the limit was served: %v", err)
	}
	// Closing one lets it in.
	_ = held[0].Close()
	if resp := readResponse(t, third, bufio.NewReader(third), time.Now().Add(connBound)); resp.Status != http.StatusOK {
		t.Fatalf("healthz after a slot freed: %d %s", resp.Status, resp.Body)
	}
}

// The default bound on a node's connections must leave room for its
// WebSocket connections, whose own limits answer 429, and for HTTP
// clients beside them.
func TestC12_DefaultConnectionLimitLeavesRoomForWebSockets(t *testing.T) {
	t.Parallel()
	websockets := events.DefaultMaxConnections + workers.DefaultMaxConnections
	if room := config.DefaultMaxConnections - websockets; room < 512 {
		t.Errorf("server.max_connections %d leaves %d connections beside %d WebSocket ones, want at least 512",
			config.DefaultMaxConnections, room, websockets)
	}
}
