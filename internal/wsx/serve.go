package wsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
)

// CleanupTimeout bounds the work that follows a connection's end or must not
// be cut short by it, such as recording or closing its session and giving
// back a lease whose frame was not sent.
const CleanupTimeout = 5 * time.Second

// CleanupContext returns a context for such work: it keeps ctx's values but
// not its cancellation, and ends after CleanupTimeout.
func CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// Session is a protocol's side of one connection after its hello, as
// Entry.Serve drives it.
type Session interface {
	// Handle answers one client frame. It runs in the request loop, one
	// frame at a time, and returns false when the connection is to close.
	Handle(f *Frame) bool
	// Dispatch sends the frames the server starts (deliveries,
	// assignments) until the connection's context ends. It runs in its
	// own goroutine, beside the request loop.
	Dispatch()
	// End runs once the request loop and Dispatch have returned and the
	// connection is closing: it waits for the answers still due and
	// closes the session's record (within a CleanupContext).
	End()
}

// Counter is implemented by sessions that count what they did beyond the
// leases the connection sent (which Serve counts itself), such as ACKs
// recorded, for the session's close log line.
type Counter interface {
	// Counts returns the counts as log attributes; it is called after End.
	Counts() []slog.Attr
}

// OpenFunc answers the hello frame f of connection c, upgraded from r. It
// returns the connection's session after having sent the welcome; an error
// when the hello is refused, which Serve then sends in reply to f before
// closing the connection (Refuse); or nil and nil when it has already closed
// the connection or the connection ended.
type OpenFunc func(c *Conn, f *Frame, r *http.Request) (Session, error)

// Serve serves one connection of the entry from upgrade to teardown: it
// upgrades r (or writes the HTTP refusal), reads the first frame, which must
// be of type helloType without reply_to or error, and hands it to open. A
// session's Dispatch then runs in its own goroutine while the request loop
// hands every client frame to Handle, until the connection ends or Handle
// returns false; Serve closes the connection with 1000, waits for Dispatch
// and calls End before it returns. Shutdown waits for every Serve.
func (e *Entry) Serve(w http.ResponseWriter, r *http.Request, helloType string, open OpenFunc) {
	if !e.serveStart() {
		// The entry is draining: Upgrade answers 503.
		_, _ = e.Upgrade(w, r)
		return
	}
	defer e.serveDone()
	c, err := e.Upgrade(w, r)
	if err != nil {
		return
	}
	defer c.Close(CloseNormal, "")
	f, err := c.Recv(c.Context())
	if err != nil {
		return
	}
	var s Session
	if f.Type != helloType || f.ReplyTo != "" || f.Error != nil {
		err = httpx.Errorf(httpx.CodeInvalidArgument, "the first frame must be %s without reply_to or error", helloType)
	} else {
		s, err = open(c, f, r)
	}
	if err != nil {
		e.countRefused(err)
		c.Refuse(f.MessageID, err, "hello refused")
		return
	}
	if s == nil {
		return
	}
	opened := time.Now()
	e.logSession(c, "session open")
	defer func() {
		attrs := []slog.Attr{slog.Duration("duration", time.Since(opened)), slog.Int64("leases_sent", c.leasesSent.Load())}
		if st, ok := c.CloseStatus(); ok {
			attrs = append(attrs, slog.Int("close_code", st.Code), slog.Bool("closed_by_peer", st.ByPeer))
		}
		if counter, ok := s.(Counter); ok {
			attrs = append(attrs, counter.Counts()...)
		}
		e.logSession(c, "session close", attrs...)
	}()
	defer s.End()
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		s.Dispatch()
	}()
	defer func() { <-dispatched }()
	defer c.Close(CloseNormal, "")
	for {
		f, err := c.Recv(c.Context())
		if err != nil || !s.Handle(f) {
			return
		}
	}
}

// logSession writes one line about connection c's session: the entry's
// sub-protocol, the session id and the credential id (never a token), then
// attrs.
func (e *Entry) logSession(c *Conn, msg string, attrs ...slog.Attr) {
	base := []slog.Attr{
		slog.String("entry", e.cfg.Subprotocol), slog.String("session_id", c.Session()),
		slog.String("credential_id", c.Principal().CredentialID),
	}
	c.Logger().LogAttrs(context.Background(), slog.LevelInfo, msg, append(base, attrs...)...)
}

// CheckHello checks the members every hello carries: the ID of what it
// opens a session on, at body.<name>, and the capacity. Both must be
// present, the capacity from 1 to maxCapacity and the ID valid (C-11);
// the first failure is returned as INVALID_ARGUMENT.
func CheckHello(name string, id *string, capacity *int, maxCapacity int) error {
	if err := httpx.Required(
		httpx.Field{Path: "body." + name, Present: id != nil},
		httpx.Field{Path: "body.capacity", Present: capacity != nil},
	); err != nil {
		return err
	}
	if *capacity < 1 || *capacity > maxCapacity {
		return httpx.Errorf(httpx.CodeInvalidArgument, "body.capacity must be between 1 and %d", maxCapacity)
	}
	if !httpx.ValidID(*id) {
		return httpx.Errorf(httpx.CodeInvalidArgument, "body.%s must be 32 lowercase hex characters", name)
	}
	return nil
}

// RefusalCode is the close code after a refused request: 1011 when the
// check could not be made (UNAVAILABLE, a temporary failure), 1013 when a
// limit is reached (CAPACITY_EXCEEDED), 1008 when it failed.
func RefusalCode(err error) int {
	var he *httpx.Error
	if errors.As(err, &he) {
		switch he.Code {
		case httpx.CodeUnavailable:
			return CloseInternalError
		case httpx.CodeCapacityExceeded:
			return CloseTryAgainLater
		}
	}
	return ClosePolicyViolation
}

// Refuse sends err in reply to replyTo ("" for none) and closes the
// connection with RefusalCode(err) and reason.
func (c *Conn) Refuse(replyTo string, err error, reason string) {
	c.Fail(replyTo, err, RefusalCode(err), reason)
}

// Fail sends err in reply to replyTo ("" for none) and closes the connection
// with code and reason.
func (c *Conn) Fail(replyTo string, err error, code int, reason string) {
	_ = c.SendError(replyTo, err)
	c.Close(code, reason)
}

// Unavailable answers replyTo ("" for none) with UNAVAILABLE and message,
// closes the connection with 1011 "unavailable" and logs what failed with
// its cause and the connection's session, once bound.
func (c *Conn) Unavailable(replyTo, message, what string, cause error) {
	if id := c.Session(); id != "" {
		c.logger.Warn(what, "session_id", id, "err", cause)
	} else {
		c.logger.Warn(what, "err", cause)
	}
	c.Fail(replyTo, httpx.Errorf(httpx.CodeUnavailable, "%s", message), CloseInternalError, "unavailable")
}

// Reply sends a frame of type typ with body in reply to f. A body that
// cannot be encoded is a bug: it is logged and nothing is sent.
func (c *Conn) Reply(f *Frame, typ string, body any) {
	r, err := NewFrame(typ, f.MessageID, body)
	if err != nil {
		c.logger.Error("encode "+typ, "err", err)
		return
	}
	_ = c.Send(r)
}

// Welcome binds the connection to session id and sends the welcome frame
// of type typ with body in reply to hello. An error means the connection
// ended before its welcome: the session never started.
func (c *Conn) Welcome(id string, hello *Frame, typ string, body any) error {
	if err := c.BindSession(id); err != nil {
		return err
	}
	welcome, err := NewFrame(typ, hello.MessageID, body)
	if err != nil {
		return err
	}
	return c.Send(welcome)
}

// UnsentDelay is how long a lease whose frame was not sent waits before it
// is offered again. A frame that could not be encoded will not encode the
// next time either; the delay keeps such a lease from being taken and given
// back in a loop.
const UnsentDelay = time.Second

// SendLease sends a frame of type typ with body that hands the client a
// persisted lease. When the frame is not written it calls unsent with the
// cause, which gives the lease back at once (usually through Unsent). It
// returns false when the connection is closing.
func (c *Conn) SendLease(typ string, body any, unsent func(cause error)) bool {
	f, err := NewFrame(typ, "", body)
	if err == nil {
		err = c.Send(f)
	}
	if err == nil {
		c.leasesSent.Add(1)
		return true
	}
	unsent(err)
	return !errors.Is(err, ErrClosed)
}

// Unsent handles a frame of type typ that was to hand the client a
// persisted lease and was not sent because of cause: it logs why (a
// warning when the connection had ended, an error otherwise), with the
// session and attrs naming the lease, then gives the lease back with
// giveBack within a CleanupContext, so that it neither holds the session's
// capacity nor uses an attempt no client saw. A lease that cannot be given
// back is logged and expires instead.
func (c *Conn) Unsent(typ string, cause error, giveBack func(ctx context.Context) error, attrs ...any) {
	level := slog.LevelError
	if errors.Is(cause, ErrClosed) {
		level = slog.LevelWarn // the connection ended between lease and send
	}
	attrs = append([]any{"session_id", c.Session()}, attrs...)
	c.logger.Log(context.Background(), level, typ+" not sent; giving the lease back", append(attrs, "err", cause)...)
	ctx, cancel := CleanupContext(c.ctx)
	defer cancel()
	if err := giveBack(ctx); err != nil {
		c.logger.Warn("unsent lease not given back; it expires instead", append(attrs, "err", err)...)
	}
}

// Stop is the Stop of a module that serves the entry: it shuts the entry
// down (Shutdown) and then waits, within ctx, for what the connections
// left behind, such as the node's batch of ACKs, through each wait. It
// returns the first error. On a nil Entry, the entry of a module that was
// never provisioned, it does nothing.
func (e *Entry) Stop(ctx context.Context, waits ...func(context.Context) error) error {
	if e == nil {
		return nil
	}
	err := e.Shutdown(ctx)
	for _, wait := range waits {
		if werr := wait(ctx); werr != nil && err == nil {
			err = fmt.Errorf("wsx: stop: still pending: %w", werr)
		}
	}
	return err
}

// serveStart counts a Serve, unless the entry is draining.
func (e *Entry) serveStart() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return false
	}
	e.serving++
	return true
}

// serveDone counts a Serve's end.
func (e *Entry) serveDone() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.serving--
	if e.draining && e.serving == 0 {
		close(e.served)
	}
}
