package wsx

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/httpx"
)

func TestC18_InvalidEnvelopeCloses1008(t *testing.T) {
	t.Parallel()
	for _, tt := range badEnvelopes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			ws, server := env.dial(t)
			send(t, ws, tt.text)
			ce := expectClose(t, ws, ClosePolicyViolation)
			if !strings.HasPrefix(ce.Text, "invalid envelope") {
				t.Errorf("close reason = %q", ce.Text)
			}
			if _, err := server.Recv(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("Recv = %v, want ErrClosed", err)
			}
			if got := waitDone(t, server); got.Code != ClosePolicyViolation || got.ByPeer {
				t.Errorf("server close = %+v", got)
			}
		})
	}
}

func TestC18_BinaryFrameCloses1008(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(helloText)); err != nil {
		t.Fatal(err)
	}
	expectClose(t, ws, ClosePolicyViolation)
	waitDone(t, server)
}

func TestC17_FrameSizeLimit(t *testing.T) {
	t.Parallel()
	// frameOfSize returns a valid hello of exactly n bytes.
	frameOfSize := func(n int) string {
		const prefix = `{"protocol_version":"1","type":"events.hello","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","body":{"pad":"`
		const suffix = `"}}`
		return prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	}

	t.Run("AtLimit", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		ws, server := env.dial(t)
		send(t, ws, frameOfSize(MaxFrameBytes))
		if f := recv(t, server); len(f.Body) != MaxFrameBytes-len(`{"protocol_version":"1","type":"events.hello","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","body":}`) {
			t.Errorf("body of %d bytes", len(f.Body))
		}
	})
	t.Run("OverLimitCloses1009", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		ws, server := env.dial(t)
		send(t, ws, frameOfSize(MaxFrameBytes+1))
		expectClose(t, ws, CloseTooBig)
		if got := waitDone(t, server); got.Code != CloseTooBig {
			t.Errorf("server close = %+v", got)
		}
	})
	t.Run("FragmentedOverLimitCloses1009", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		ws, server := env.dial(t)
		w, err := ws.NextWriter(websocket.TextMessage)
		if err != nil {
			t.Fatal(err)
		}
		// Each Write of the client sends one fragment.
		chunk := []byte(strings.Repeat(" ", 64<<10))
		for range MaxFrameBytes/len(chunk) + 1 {
			if _, err := w.Write(chunk); err != nil {
				break
			}
		}
		_ = w.Close()
		expectClose(t, ws, CloseTooBig)
		waitDone(t, server)
	})
}

func TestE5_SessionBinding(t *testing.T) {
	t.Parallel()
	t.Run("RightSession", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		ws, server := env.dial(t)
		session := handshake(t, ws, server)
		send(t, ws, pingText(session))
		if f := recv(t, server); f.SessionID != session || f.Type != "events.ping" {
			t.Errorf("frame = %+v", f)
		}
	})
	for _, tt := range []struct {
		name    string
		session func(bound string) string
		reason  string
	}{
		{"WrongSession", func(string) string { return NewID() }, "wrong session_id"},
		{"MissingSession", func(string) string { return "" }, "missing session_id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			ws, server := env.dial(t)
			session := handshake(t, ws, server)
			send(t, ws, pingText(tt.session(session)))
			if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != tt.reason {
				t.Errorf("close reason = %q, want %q", ce.Text, tt.reason)
			}
			waitDone(t, server)
		})
	}
	t.Run("SessionBeforeBinding", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		ws, server := env.dial(t)
		send(t, ws, withMember(`"session_id":"`+idB+`"`))
		expectClose(t, ws, ClosePolicyViolation)
		waitDone(t, server)
	})
	t.Run("FrameReadBeforeBinding", func(t *testing.T) {
		t.Parallel()
		// The client sends a frame without waiting for the welcome: it
		// cannot know the session, so the frame is refused even when the
		// reader took it before the session was bound.
		env := setup(t)
		ws, server := env.dial(t)
		send(t, ws, helloText)
		send(t, ws, pingText(""))
		hello := recv(t, server)
		if err := server.BindSession(NewID()); err != nil {
			t.Fatal(err)
		}
		welcome, _ := NewFrame("events.welcome", hello.MessageID, map[string]any{})
		_ = server.Send(welcome) // may find the connection already closing
		if _, err := server.Recv(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Recv = %v, want ErrClosed", err)
		}
		if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != "missing session_id" {
			t.Errorf("close reason = %q", ce.Text)
		}
		waitDone(t, server)
	})
	t.Run("BindOnce", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		_, server := env.dial(t)
		if err := server.BindSession("x"); err == nil {
			t.Error("BindSession accepted an invalid id")
		}
		if err := server.BindSession(idA); err != nil {
			t.Fatal(err)
		}
		if err := server.BindSession(idB); err == nil || server.Session() != idA {
			t.Errorf("second BindSession = %v, session %q", err, server.Session())
		}
	})
}

func TestE2_HelloTimeout(t *testing.T) {
	t.Parallel()
	env := setup(t, func(c *Config) { c.HelloTimeout = 100 * time.Millisecond })
	start := time.Now()
	ws, server := env.dial(t)
	if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != "no frame within the hello timeout" {
		t.Errorf("close reason = %q", ce.Text)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("closed after %s, before the hello timeout", d)
	}
	waitDone(t, server)
}

func TestE14_IdleTimeout(t *testing.T) {
	t.Parallel()
	env := setup(t, func(c *Config) { c.IdleTimeout = 150 * time.Millisecond })
	ws, server := env.dial(t)
	handshake(t, ws, server)
	if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != "no frame within the idle timeout" {
		t.Errorf("close reason = %q", ce.Text)
	}
	if got := waitDone(t, server); got.Code != ClosePolicyViolation {
		t.Errorf("server close = %+v", got)
	}
}

func TestE14_FramesKeepConnectionOpen(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	env := setup(t, func(c *Config) { c.IdleTimeout = idle; c.HelloTimeout = idle })
	ws, server := env.dial(t)
	session := handshake(t, ws, server)
	// Eight pings a fifth of the idle timeout apart span more than the
	// idle timeout.
	ticker := time.NewTicker(idle / 5)
	defer ticker.Stop()
	for range 8 {
		<-ticker.C
		send(t, ws, pingText(session))
		recv(t, server)
	}
	if err := server.Context().Err(); err != nil {
		t.Fatalf("connection closed: %v", context.Cause(server.Context()))
	}
	// Control frames are not client frames: pinging only at the WebSocket
	// level does not keep the connection open.
	stop := make(chan struct{})
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for {
			select {
			case <-ticker.C:
				if ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(testWait)) != nil {
					return
				}
			case <-stop:
				return
			}
		}
	}()
	expectClose(t, ws, ClosePolicyViolation)
	close(stop)
	<-pinged
	waitDone(t, server)
}

func TestE14_SlowProtocolDoesNotMakeClientIdle(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	env := setup(t, func(c *Config) { c.IdleTimeout = idle; c.InboundQueue = 1 })
	ws, server := env.dial(t)
	// The frames arrive together; the session is never bound, so they
	// carry none.
	send(t, ws, helloText)
	for range 3 {
		send(t, ws, pingText(""))
	}
	// The protocol takes no frame for three idle timeouts: the reader
	// stops at the full queue, and waiting there is not client idleness.
	time.Sleep(3 * idle)
	for range 4 {
		recv(t, server)
	}
	if err := server.Context().Err(); err != nil {
		t.Fatalf("connection closed: %v", context.Cause(server.Context()))
	}
	expectClose(t, ws, ClosePolicyViolation)
	waitDone(t, server)
}

func TestE6_OutboundQueueBound(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	const writeTimeout = 200 * time.Millisecond
	env := setup(t, func(c *Config) {
		c.OutboundQueue = 3
		c.WriteTimeout = writeTimeout
		c.hooks.beforeWrite = func() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
	})
	ws, server := env.dial(t)
	ping := func() *Frame {
		f, _ := NewFrame("events.ping", "", map[string]any{})
		return f
	}

	// The writer takes the first frame and stalls writing it.
	if err := server.Send(ping()); err != nil {
		t.Fatal(err)
	}
	<-entered
	// The queue holds three more without waiting.
	for i := range 3 {
		start := time.Now()
		if err := server.Send(ping()); err != nil {
			t.Fatalf("Send %d: %v", i+2, err)
		}
		if d := time.Since(start); d >= writeTimeout {
			t.Errorf("Send %d waited %s with room in the queue", i+2, d)
		}
	}
	// The next one waits the write timeout, then gives up and ends the
	// connection.
	start := time.Now()
	err := server.Send(ping())
	if d := time.Since(start); !errors.Is(err, ErrClosed) || d < writeTimeout {
		t.Fatalf("Send on a full queue = %v after %s, want ErrClosed after %s", err, d, writeTimeout)
	}
	if err := server.Send(ping()); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after the timeout = %v, want ErrClosed", err)
	}
	close(release)
	if got := waitDone(t, server); got.Code != CloseAbnormal || got.Reason != "outbound queue full" {
		t.Errorf("server close = %+v", got)
	}
	// The connection ended without a close frame.
	_ = ws.SetReadDeadline(time.Now().Add(testWait))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		if ce, ok := errors.AsType[*websocket.CloseError](err); ok && ce.Code != websocket.CloseAbnormalClosure {
			t.Errorf("client got close %d, want none", ce.Code)
		}
		break
	}
}

func TestE14_WriteTimeoutClosesConnection(t *testing.T) {
	t.Parallel()
	env := setup(t, func(c *Config) { c.WriteTimeout = 200 * time.Millisecond })
	_, server := env.dial(t) // the client never reads
	body := map[string]string{"pad": strings.Repeat("x", 256<<10)}
	var err error
	for range 10000 {
		f, _ := NewFrame("event.deliver", "", body)
		if err = server.Send(f); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Send = %v, want ErrClosed once the client stopped reading", err)
	}
	if got := waitDone(t, server); got.Code != CloseAbnormal {
		t.Errorf("server close = %+v", got)
	}
}

// A client that stops reading is closed within about the write timeout
// even when every frame fits the kernel's send buffer, so that no write
// ever blocks, and even while it keeps sending pings (E-14, F-5).
func TestE14_NeverReadingClientClosedWithinWriteTimeout(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the send watch is Linux only")
	}
	const writeTimeout = time.Second
	// A behaviour bound, not a speed target: well above the write timeout,
	// well below the idle timeout that closed such clients before.
	const bound = 30 * time.Second
	env := setup(t, func(c *Config) { c.WriteTimeout = writeTimeout })
	ws := dialTinyReceiveBuffer(t, env)
	server := env.accept(t)
	send(t, ws, helloText)
	recv(t, server)

	// 64 KiB: far more than the client's receive buffer takes, far less
	// than the server's send buffer does.
	start := time.Now()
	pad := map[string]string{"pad": strings.Repeat("x", 1024)}
	for i := range 64 {
		f, _ := NewFrame("event.deliver", "", pad)
		if err := server.Send(f); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	timeout := time.After(bound)
wait:
	for {
		select {
		case <-server.Done():
			break wait
		case <-ticker.C:
			_ = ws.SetWriteDeadline(time.Now().Add(testWait))
			_ = ws.WriteMessage(websocket.TextMessage, []byte(pingText("")))
		case <-timeout:
			t.Fatalf("a client that never reads is still open after %s (write timeout %s)", bound, writeTimeout)
		}
	}
	if got := waitDone(t, server); got.Code != CloseAbnormal || got.Reason != "write timeout" {
		t.Errorf("server close = %+v, want 1006 write timeout", got)
	}
	t.Logf("closed %s after the frames were queued", time.Since(start).Round(100*time.Millisecond))
	// The client learns it as soon as it writes.
	for {
		_ = ws.SetWriteDeadline(time.Now().Add(testWait))
		if err := ws.WriteMessage(websocket.TextMessage, []byte(pingText(""))); err != nil {
			break
		}
		if time.Since(start) > bound+testWait {
			t.Fatal("the client can still write to a closed connection")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialTinyReceiveBuffer opens a client connection whose socket has the
// smallest receive buffer the kernel allows, and never reads from it.
func dialTinyReceiveBuffer(t *testing.T, env *testEnv) *websocket.Conn {
	t.Helper()
	nd := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
		return errors.Join(err, serr)
	}}
	d := websocket.Dialer{Subprotocols: []string{testProtocol}, HandshakeTimeout: testWait, NetDialContext: nd.DialContext}
	ws, _, err := d.Dial(env.url, http.Header{"Authorization": {tokenConsumer}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

func TestE15_ErrorFrameThenClose(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	send(t, ws, helloText)
	hello := recv(t, server)
	// Frames queued before Close are written before the close frame.
	if err := server.SendError(hello.MessageID, httpx.Errorf(httpx.CodeNotFound, "subscription not found")); err != nil {
		t.Fatal(err)
	}
	if err := server.SendError("", errors.New("store: claim: connection refused")); err != nil {
		t.Fatal(err)
	}
	if err := server.SendError("", context.DeadlineExceeded); err != nil {
		t.Fatal(err)
	}
	if err := server.SendError("", fmt.Errorf("store: claim: %w", driver.ErrBadConn)); err != nil {
		t.Fatal(err)
	}
	server.Close(ClosePolicyViolation, "subscription not found")

	for _, want := range []FrameError{
		{Code: httpx.CodeNotFound, Message: "subscription not found"},
		{Code: httpx.CodeInternal, Message: "internal error"},
		{Code: httpx.CodeUnavailable, Message: "deadline exceeded"},
		{Code: httpx.CodeUnavailable, Message: httpx.ErrDatabaseUnavailable.Message},
	} {
		f := readFrame(t, ws)
		if f.Type != TypeError || f.Error == nil || *f.Error != want || f.SessionID != "" || f.Body != nil {
			t.Errorf("frame = %+v (error %+v), want error %+v", f, f.Error, want)
		}
	}
	if ce := expectClose(t, ws, ClosePolicyViolation); ce.Text != "subscription not found" {
		t.Errorf("close reason = %q", ce.Text)
	}
	waitDone(t, server)
}

func TestC18_SendCompletesEnvelope(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	session := handshake(t, ws, server)

	f, _ := NewFrame("event.deliver", "", map[string]any{"lease_secret": NewSecret()})
	if err := server.Send(f); err != nil {
		t.Fatal(err)
	}
	got := readFrame(t, ws)
	if got.SessionID != session || got.MessageID != f.MessageID || got.ProtocolVersion != "1" || got.ReplyTo != "" {
		t.Errorf("frame = %+v", got)
	}

	// Frames that break the envelope are bugs: Send refuses them and the
	// connection stays open.
	for name, f := range map[string]*Frame{
		"OtherSession": {Type: "ack", SessionID: idA},
		"BadType":      {Type: "Ack"},
		"BodyArray":    {Type: "ack", Body: []byte(`[]`)},
		"BodyInvalid":  {Type: "ack", Body: []byte(`{"a":}`)},
		"ErrorNoCode":  {Type: TypeError, Error: &FrameError{Message: "x"}},
		"TooLarge":     {Type: "ack", Body: []byte(`{"pad":"` + strings.Repeat("x", MaxFrameBytes) + `"}`)},
	} {
		if err := server.Send(f); err == nil || errors.Is(err, ErrClosed) {
			t.Errorf("Send(%s) = %v, want an error", name, err)
		}
	}
	if err := server.Context().Err(); err != nil {
		t.Fatalf("connection closed: %v", context.Cause(server.Context()))
	}
	ack, _ := NewFrame("ack", idC, map[string]any{})
	if err := server.Send(ack); err != nil {
		t.Fatal(err)
	}
	if got := readFrame(t, ws); got.Type != "ack" || got.ReplyTo != idC {
		t.Errorf("frame = %+v", got)
	}
}

func TestConn_CloseIsIdempotent(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	ping, _ := NewFrame("events.ping", "", map[string]any{})
	if err := server.Send(ping); err != nil {
		t.Fatal(err)
	}
	server.Close(CloseNormal, "bye")
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { server.Close(CloseInternalError, "late") })
	}
	wg.Wait()
	if server.Context().Err() == nil {
		t.Error("context not canceled by Close")
	}
	readFrame(t, ws)
	if ce := expectClose(t, ws, CloseNormal); ce.Text != "bye" {
		t.Errorf("close reason = %q", ce.Text)
	}
	if got := waitDone(t, server); got.Code != CloseNormal || got.Reason != "bye" || got.ByPeer {
		t.Errorf("server close = %+v", got)
	}
	server.Close(CloseInternalError, "after teardown")
	if err := server.Send(ping); !errors.Is(err, ErrClosed) {
		t.Errorf("Send = %v, want ErrClosed", err)
	}
	if _, err := server.Recv(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv = %v, want ErrClosed", err)
	}
}

func TestConn_CloseReasonIsTruncated(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	server.Close(CloseNormal, strings.Repeat("é", 100))
	ce := expectClose(t, ws, CloseNormal)
	if len(ce.Text) > maxReasonBytes || ce.Text != strings.Repeat("é", maxReasonBytes/2) {
		t.Errorf("reason of %d bytes: %q", len(ce.Text), ce.Text)
	}
	waitDone(t, server)
}

func TestConn_ClientClose(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	msg := websocket.FormatCloseMessage(CloseNormal, "done")
	if err := ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(testWait)); err != nil {
		t.Fatal(err)
	}
	expectClose(t, ws, CloseNormal) // the server answers the close frame
	if got := waitDone(t, server); got.Code != CloseNormal || got.Reason != "done" || !got.ByPeer {
		t.Errorf("server close = %+v", got)
	}
	if _, err := server.Recv(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv = %v, want ErrClosed", err)
	}
}

func TestConn_ClientVanishes(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ws, server := env.dial(t)
	_ = ws.NetConn().Close()
	if got := waitDone(t, server); got.Code != CloseAbnormal {
		t.Errorf("server close = %+v", got)
	}
}

func TestConn_RecvHonoursContext(t *testing.T) {
	t.Parallel()
	env := setup(t)
	_, server := env.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := server.Recv(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Recv = %v, want context.Canceled", err)
	}
	if server.Context().Err() != nil {
		t.Error("a canceled Recv closed the connection")
	}
}

func TestConn_FramesInOrder(t *testing.T) {
	t.Parallel()
	env := setup(t, func(c *Config) { c.InboundQueue = 1 })
	ws, server := env.dial(t)
	session := handshake(t, ws, server)
	var sent []string
	for range 20 {
		text := pingText(session)
		f, err := DecodeFrame([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, f.MessageID)
		send(t, ws, text)
	}
	for i, id := range sent {
		if f := recv(t, server); f.MessageID != id {
			t.Fatalf("frame %d = %s, want %s", i, f.MessageID, id)
		}
	}
}

func TestConn_NoLeaksAfterManyConnections(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for i := range 60 {
		ws, server := env.dial(t)
		switch i % 4 {
		case 0: // the client goes away
			_ = ws.Close()
		case 1: // the client closes properly
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(CloseNormal, ""), time.Now().Add(testWait))
			expectClose(t, ws, CloseNormal)
		case 2: // the server closes after a handshake
			handshake(t, ws, server)
			server.Close(CloseNormal, "")
			expectClose(t, ws, CloseNormal)
		case 3: // the client breaks the protocol
			send(t, ws, "{}")
			expectClose(t, ws, ClosePolicyViolation)
		}
		waitDone(t, server)
		_ = ws.Close()
	}
	if n := env.entry.openConns(); n != 0 {
		t.Errorf("%d slots still taken", n)
	}
}
