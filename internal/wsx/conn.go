package wsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Close codes (RFC 6455 §7.4.1) that Orbit sends or reports.
const (
	CloseNormal          = websocket.CloseNormalClosure     // 1000
	CloseGoingAway       = websocket.CloseGoingAway         // 1001
	ClosePolicyViolation = websocket.ClosePolicyViolation   // 1008
	CloseTooBig          = websocket.CloseMessageTooBig     // 1009
	CloseInternalError   = websocket.CloseInternalServerErr // 1011
	// CloseServiceRestart tells the client to reconnect at once: the
	// node lost its membership in the cluster and its sessions were
	// closed for it.
	CloseServiceRestart = websocket.CloseServiceRestart // 1012
	// CloseTryAgainLater follows a refusal for capacity
	// (CAPACITY_EXCEEDED): the client did nothing wrong and reconnects
	// with backoff.
	CloseTryAgainLater = websocket.CloseTryAgainLater // 1013
	// CloseAbnormal is never sent: it reports a connection that ended
	// without a close frame from this side, such as after a write
	// timeout or a lost socket.
	CloseAbnormal = websocket.CloseAbnormalClosure // 1006
)

// maxReasonBytes is the longest close reason that fits a control frame.
const maxReasonBytes = 123

// ErrClosed is returned by Send and Recv once the connection is closing.
// The close code and reason are the cause of the connection's context.
var ErrClosed = errors.New("wsx: connection closed")

// CloseError describes how a connection ended. It is the cause of the
// connection's context (context.Cause) once the connection is closing.
type CloseError struct {
	// Code is the close code sent, or received when ByPeer, or
	// CloseAbnormal when none was sent.
	Code int
	// Reason is the close reason, at most 123 bytes.
	Reason string
	// ByPeer reports that the client closed the connection.
	ByPeer bool
}

// Error returns the code and the reason.
func (e *CloseError) Error() string {
	by := "server"
	if e.ByPeer {
		by = "client"
	}
	return fmt.Sprintf("wsx: connection closed by %s with %d %q", by, e.Code, e.Reason)
}

// Conn is one upgraded connection. It owns two goroutines: a reader that
// decodes client frames into a bounded inbound queue, and a writer that
// writes the bounded outbound queue, each frame within the write timeout.
// Its rules:
//
//   - The first frame must arrive within the hello timeout and every later
//     one within the idle timeout of the previous one; otherwise the
//     connection closes with 1008. Control frames do not count.
//   - A binary frame, a frame that DecodeFrame rejects or a frame with a
//     wrong session id closes the connection with 1008; a frame over
//     MaxFrameBytes closes it with 1009.
//   - Before BindSession, client frames must not carry a session_id; after
//     it, every client frame must carry the bound one.
//   - A write that times out, a Send that finds the outbound queue full
//     for the write timeout, or (on Linux) data that waits in the kernel
//     for the write timeout without the client acknowledging any of it,
//     ends the connection without a close frame and resets it.
//
// Send, SendError, Close, BindSession and the accessors are safe for
// concurrent use; Recv is meant for one goroutine at a time.
type Conn struct {
	entry     *Entry
	cfg       *Config
	ws        *websocket.Conn
	principal *auth.Principal
	logger    *slog.Logger
	ctx       context.Context
	cancel    context.CancelCauseFunc

	in  chan *Frame // decoded client frames
	out chan []byte // encoded server frames

	sessionMu sync.Mutex
	session   string

	// leasesSent counts the frames SendLease wrote, for the session's
	// close log line.
	leasesSent atomic.Int64

	closeOnce sync.Once
	closing   chan struct{} // closed when closing starts
	status    CloseError    // set before closing is closed
	sendClose bool          // set before closing is closed

	gotFrame   atomic.Bool // the client has sent a frame
	reset      atomic.Bool // the client stopped taking data: reset, do not linger
	readerDone chan struct{}
	peerClosed bool // written by the reader before readerDone is closed
	done       chan struct{}
}

// newConn returns the Conn of an upgraded request, not yet started.
func newConn(e *Entry, ws *websocket.Conn, r *http.Request, p *auth.Principal) *Conn {
	ws.SetReadLimit(MaxFrameBytes)
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	logger := e.cfg.Logger
	if id := httpx.RequestID(r.Context()); id != "" {
		logger = logger.With(slog.String("request_id", id))
	}
	return &Conn{
		entry:      e,
		cfg:        &e.cfg,
		ws:         ws,
		principal:  p,
		logger:     logger,
		ctx:        ctx,
		cancel:     cancel,
		in:         make(chan *Frame, e.cfg.InboundQueue),
		out:        make(chan []byte, e.cfg.OutboundQueue),
		closing:    make(chan struct{}),
		readerDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// start runs the reader and the writer.
func (c *Conn) start() {
	go c.readLoop()
	go c.writeLoop()
}

// Principal returns the credential that opened the connection, as it was
// at the upgrade.
func (c *Conn) Principal() *auth.Principal { return c.principal }

// Logger returns a logger that tags records with the upgrade's request id.
// Callers must never log tokens, lease secrets, results or task input.
func (c *Conn) Logger() *slog.Logger { return c.logger }

// Context returns the connection's context. It carries the values of the
// upgrade request and is canceled, with a *CloseError as its cause, as soon
// as the connection starts closing.
func (c *Conn) Context() context.Context { return c.ctx }

// Done returns a channel that is closed when the connection is fully torn
// down: both goroutines have ended, the socket is closed and the entry's
// slot is free.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Session returns the bound session id, or "" before BindSession.
func (c *Conn) Session() string {
	c.sessionMu.Lock()
	defer c.sessionMu.Unlock()
	return c.session
}

// BindSession binds the connection to the session id (E-3, E-5). It must
// be called before the frame that announces the session is sent; from then
// on every client frame must carry id, and Send puts id into every frame.
// It fails for an invalid id or when a session is already bound.
func (c *Conn) BindSession(id string) error {
	if !httpx.ValidID(id) {
		return errors.New("wsx: bind session: not an ID")
	}
	c.sessionMu.Lock()
	defer c.sessionMu.Unlock()
	if c.session != "" {
		return errors.New("wsx: bind session: already bound")
	}
	c.session = id
	return nil
}

// sessionError returns why f breaks the session binding, or "".
func (c *Conn) sessionError(f *Frame) string {
	bound := c.Session()
	switch {
	case bound == "" && f.SessionID != "":
		return "session_id sent before the session is bound"
	case bound != "" && f.SessionID == "":
		return "missing session_id"
	case bound != "" && f.SessionID != bound:
		return "wrong session_id"
	}
	return ""
}

// Recv returns the next client frame. It returns ErrClosed once the
// connection is closing, even when frames are still queued, and ctx's error
// when ctx ends first. A frame that was read before BindSession and lacks
// the session id now bound closes the connection with 1008.
func (c *Conn) Recv(ctx context.Context) (*Frame, error) {
	if c.isClosing() {
		return nil, ErrClosed
	}
	select {
	case f := <-c.in:
		if reason := c.sessionError(f); reason != "" {
			c.shutdown(ClosePolicyViolation, reason, true, false)
			return nil, ErrClosed
		}
		return f, nil
	case <-c.closing:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Send completes f and queues it for writing. It sets f.ProtocolVersion
// and, when empty, f.MessageID (a new random id) and, once a session is
// bound, f.SessionID, so the caller can read them afterwards. A frame that
// breaks Frame.Validate, carries another session id or encodes to more than
// MaxFrameBytes is a bug: Send returns an error and the connection stays
// open.
//
// Send waits at most the write timeout for room in the outbound queue. If
// the queue stays full that long, the client is not keeping up: the
// connection ends and Send returns an error wrapping ErrClosed. On a closing
// connection Send returns ErrClosed. A frame queued while the connection
// starts closing may be dropped; frames queued before Close are written
// before the close frame.
func (c *Conn) Send(f *Frame) error {
	if f.ProtocolVersion == "" {
		f.ProtocolVersion = ProtocolVersion
	}
	if f.MessageID == "" {
		f.MessageID = NewID()
	}
	if s := c.Session(); s != "" {
		switch f.SessionID {
		case "":
			f.SessionID = s
		case s:
		default:
			return fmt.Errorf("wsx: send %s: session_id is not the connection's session", f.Type)
		}
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("wsx: send %s: %w", f.Type, err)
	}
	b, err := f.encode()
	if err != nil {
		return fmt.Errorf("wsx: send %s: %w", f.Type, err)
	}
	if len(b) > MaxFrameBytes {
		return fmt.Errorf("wsx: send %s: frame of %d bytes exceeds %d", f.Type, len(b), MaxFrameBytes)
	}
	if c.isClosing() {
		return ErrClosed
	}
	select {
	case c.out <- b:
		return nil
	default:
	}
	timer := time.NewTimer(c.cfg.WriteTimeout)
	defer timer.Stop()
	select {
	case c.out <- b:
		return nil
	case <-c.closing:
		return ErrClosed
	case <-timer.C:
		c.stalled("outbound queue full")
		return fmt.Errorf("wsx: send %s: outbound queue full for %s: %w", f.Type, c.cfg.WriteTimeout, ErrClosed)
	}
}

// SendError sends an error frame (E-15) answering replyTo ("" when it
// answers no request). An *httpx.Error is sent with its code and message;
// context.DeadlineExceeded and context.Canceled become UNAVAILABLE; an
// error that says the database cannot be reached (db.IsUnavailable) becomes
// httpx.ErrDatabaseUnavailable and is logged as a warning; any other error
// is logged and sent as INTERNAL "internal error". It returns what Send
// returns. Whether the connection then stays open is the protocol's
// decision.
func (c *Conn) SendError(replyTo string, err error) error {
	var he *httpx.Error
	var code httpx.Code
	var msg string
	switch {
	case errors.As(err, &he) && he != nil:
		code, msg = he.Code, he.Message
	case errors.Is(err, context.DeadlineExceeded):
		code, msg = httpx.CodeUnavailable, "deadline exceeded"
	case errors.Is(err, context.Canceled):
		code, msg = httpx.CodeUnavailable, "request canceled"
	case db.IsUnavailable(err):
		c.logger.LogAttrs(c.ctx, slog.LevelWarn, "database unavailable", slog.String("error", err.Error()))
		code, msg = httpx.ErrDatabaseUnavailable.Code, httpx.ErrDatabaseUnavailable.Message
	default:
		cause := "SendError called with a nil error"
		if err != nil {
			cause = err.Error()
		}
		c.logger.LogAttrs(c.ctx, slog.LevelError, "internal error", slog.String("error", cause))
		code, msg = httpx.CodeInternal, "internal error"
	}
	return c.Send(ErrorFrame(replyTo, code, strings.ToValidUTF8(msg, "\uFFFD")))
}

// CloseStatus returns how the connection closed: its code, reason and
// whether the peer closed first; ok is false while it is open.
func (c *Conn) CloseStatus() (status CloseError, ok bool) {
	if !c.isClosing() {
		return CloseError{}, false
	}
	return c.status, true
}

// Close starts closing the connection with code and reason (at most 123
// bytes are sent) and returns at once. The writer first writes the frames
// already queued, then the close frame, both within the write timeout, and
// waits up to the write timeout for the client's close before closing the
// socket; Done is closed after that. The context is canceled at once. Close
// is idempotent: only the first call, or the first failure the connection
// detects itself, chooses the code. code must be one that may be sent,
// such as CloseNormal, CloseGoingAway, ClosePolicyViolation,
// CloseInternalError or 4000–4999.
func (c *Conn) Close(code int, reason string) {
	c.shutdown(code, reason, true, false)
}

// shutdown starts closing once; sendFrame says whether the writer is to
// flush the queue and send a close frame.
func (c *Conn) shutdown(code int, reason string, sendFrame, byPeer bool) {
	c.closeOnce.Do(func() {
		c.status = CloseError{Code: code, Reason: truncateReason(reason), ByPeer: byPeer}
		c.sendClose = sendFrame
		c.cancel(&c.status)
		close(c.closing)
	})
}

func (c *Conn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// readLoop is the reader goroutine.
func (c *Conn) readLoop() {
	defer close(c.readerDone)
	// The timer runs only while the reader waits for a frame, so that a
	// protocol slow to take frames from the inbound queue does not make
	// the client look idle. Timing out with a timer rather than a read
	// deadline keeps the connection readable, so that the client's answer
	// to the close frame is read.
	timer := time.AfterFunc(c.cfg.HelloTimeout, c.readTimedOut)
	defer timer.Stop()
	for {
		typ, b, err := c.ws.ReadMessage()
		timer.Stop()
		if err != nil {
			c.readFailed(err)
			return
		}
		c.gotFrame.Store(true)
		if c.isClosing() {
			// Discard frames until the client answers the close frame.
			continue
		}
		f, reason := c.accept(typ, b)
		if reason != "" {
			c.shutdown(ClosePolicyViolation, reason, true, false)
			continue
		}
		select {
		case c.in <- f:
			timer.Reset(c.cfg.IdleTimeout)
		case <-c.closing:
		}
	}
}

// readTimedOut closes a connection whose client sent no frame in time.
func (c *Conn) readTimedOut() {
	if c.gotFrame.Load() {
		c.shutdown(ClosePolicyViolation, "no frame within the idle timeout", true, false)
	} else {
		c.shutdown(ClosePolicyViolation, "no frame within the hello timeout", true, false)
	}
}

// accept decodes a data frame and checks its session, returning the reason
// to close the connection when it is not acceptable.
func (c *Conn) accept(typ int, b []byte) (*Frame, string) {
	if typ != websocket.TextMessage {
		return nil, "binary frames are not accepted"
	}
	f, err := DecodeFrame(b)
	if err != nil {
		if he, ok := errors.AsType[*httpx.Error](err); ok {
			return nil, "invalid envelope: " + he.Message
		}
		return nil, "invalid envelope"
	}
	if reason := c.sessionError(f); reason != "" {
		return nil, reason
	}
	return f, ""
}

// readFailed starts closing after the read error err.
func (c *Conn) readFailed(err error) {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		// The websocket package has already answered the close frame.
		c.peerClosed = true
		c.shutdown(ce.Code, ce.Text, false, true)
		return
	}
	switch {
	case c.isClosing():
		// The closing deadline passed or the socket was closed.
	case errors.Is(err, websocket.ErrReadLimit):
		// The websocket package has already sent the 1009 close frame.
		c.shutdown(CloseTooBig, fmt.Sprintf("frame exceeds %d bytes", MaxFrameBytes), true, false)
	default:
		c.shutdown(CloseAbnormal, "connection lost", false, false)
	}
}

// stalled ends a connection whose client stopped taking data.
func (c *Conn) stalled(reason string) {
	c.reset.Store(true)
	c.shutdown(CloseAbnormal, reason, false, false)
}

// writeLoop is the writer goroutine; it also tears the connection down.
func (c *Conn) writeLoop() {
	// Between writes, the watch tells a client that stopped reading while
	// the kernel still takes every frame (E-14: writes time out after the
	// write timeout, counted from the first byte the client does not
	// take).
	watch := newSendWatch(c.ws.NetConn())
	var tick <-chan time.Time
	if watch != nil {
		t := time.NewTicker(c.cfg.WriteTimeout / 10)
		defer t.Stop()
		tick = t.C
	}
	for {
		if c.isClosing() {
			c.teardown()
			return
		}
		select {
		case b := <-c.out:
			if err := c.write(b, time.Now().Add(c.cfg.WriteTimeout)); err != nil {
				if isTimeout(err) {
					c.stalled("write timeout")
				} else {
					c.shutdown(CloseAbnormal, "write failed", false, false)
				}
			}
		case now := <-tick:
			if watch.stalledFor(now) >= c.cfg.WriteTimeout {
				c.stalled("write timeout")
			}
		case <-c.closing:
		}
	}
}

// write writes one data frame by deadline.
func (c *Conn) write(b []byte, deadline time.Time) error {
	if h := c.cfg.hooks.beforeWrite; h != nil {
		h()
	}
	_ = c.ws.SetWriteDeadline(deadline)
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// teardown closes the connection as shutdown decided and frees its slot.
// It takes at most about twice the write timeout after the last write.
func (c *Conn) teardown() {
	sent := false
	if c.sendClose {
		deadline := time.Now().Add(c.cfg.WriteTimeout)
		sent = c.flush(deadline) && c.writeClose(deadline)
	}
	if sent {
		// Wait for the client's close frame, or its socket closing, that
		// long.
		_ = c.ws.SetReadDeadline(time.Now().Add(c.cfg.WriteTimeout))
	} else {
		if tc, ok := rawConn(c.ws.NetConn()).(*net.TCPConn); ok && c.reset.Load() {
			// Closing would leave the kernel holding the unread data
			// and the FIN behind it for minutes: reset at once.
			_ = tc.SetLinger(0)
		}
		_ = c.ws.NetConn().Close()
	}
	<-c.readerDone
	if sent && !c.peerClosed {
		// The reader stopped before the client's close frame. Read what
		// the client still sends until it closes too, so that closing a
		// socket with unread data does not reset the connection before
		// the client has read the close frame.
		_, _ = io.Copy(io.Discard, c.ws.NetConn())
	}
	_ = c.ws.Close()
	c.entry.release(c)
	close(c.done)
}

// flush writes the queued frames by deadline and reports whether all of
// them were written.
func (c *Conn) flush(deadline time.Time) bool {
	for {
		select {
		case b := <-c.out:
			if err := c.write(b, deadline); err != nil {
				return false
			}
		default:
			return true
		}
	}
}

// writeClose sends the close frame by deadline and reports whether a close
// frame has been sent, by this call or earlier by the websocket package.
func (c *Conn) writeClose(deadline time.Time) bool {
	msg := websocket.FormatCloseMessage(c.status.Code, c.status.Reason)
	err := c.ws.WriteControl(websocket.CloseMessage, msg, deadline)
	return err == nil || errors.Is(err, websocket.ErrCloseSent)
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// truncateReason makes s valid UTF-8 of at most maxReasonBytes bytes.
func truncateReason(s string) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= maxReasonBytes {
		return s
	}
	cut := maxReasonBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

var _ error = (*CloseError)(nil)

// rawConn returns the connection under c's wrappers, such as *tls.Conn or
// a connection-limiting listener's conn: each must have a NetConn method.
func rawConn(c net.Conn) net.Conn {
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}
