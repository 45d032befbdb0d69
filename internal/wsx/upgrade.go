package wsx

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/metrics"
)

// Defaults of Config (E-6, E-14).
const (
	DefaultMaxConns      = 128
	DefaultInboundQueue  = 4
	DefaultOutboundQueue = 8
	DefaultWriteTimeout  = 5 * time.Second
	DefaultIdleTimeout   = 60 * time.Second
	DefaultHelloTimeout  = 5 * time.Second
	// DefaultHeartbeatInterval is how often clients of both entries are
	// told to ping.
	DefaultHeartbeatInterval = 15 * time.Second
)

// authTimeout bounds authentication before an upgrade, like the management
// deadline of C-12.
const authTimeout = 8 * time.Second

// AuthenticateFunc resolves the credential of an upgrade request. It
// returns auth.ErrUnauthenticated (or another *httpx.Error) for a caller
// that is not authenticated; any other error is answered as an internal
// error.
type AuthenticateFunc func(r *http.Request) (*auth.Principal, error)

// FromAuthenticator returns the AuthenticateFunc that checks the
// Authorization header with a: exactly one header, resolved within 8
// seconds. A request with several Authorization headers, or one that is
// not a bearer token, is unauthenticated without consulting a.
func FromAuthenticator(a auth.Authenticator) AuthenticateFunc {
	return func(r *http.Request) (*auth.Principal, error) {
		ctx, cancel := context.WithTimeout(r.Context(), authTimeout)
		defer cancel()
		return auth.AuthenticateRequest(ctx, a, r.Header)
	}
}

// Config configures an Entry. Zero durations and sizes mean the defaults.
type Config struct {
	// Subprotocol is the sub-protocol the client must offer, such as
	// "orbit.events.v1". Required.
	Subprotocol string
	// Permission is the permission the credential must hold, such as
	// "events:consume". Required.
	Permission string
	// Authenticate resolves the credential of the request. Required;
	// FromAuthenticator gives the usual one.
	Authenticate AuthenticateFunc
	// MaxConns bounds the open connections of this entry on this node.
	MaxConns int
	// InboundQueue is the number of decoded client frames a connection
	// holds before it stops reading.
	InboundQueue int
	// OutboundQueue is the number of frames a connection holds for
	// writing before Send waits.
	OutboundQueue int
	// WriteTimeout bounds every write, the wait of Send for room in the
	// outbound queue, and each phase of closing.
	WriteTimeout time.Duration
	// IdleTimeout is how long a connection waits for the next client
	// frame. Only time spent waiting to read counts, not time the reader
	// waits for room in a full inbound queue.
	IdleTimeout time.Duration
	// HelloTimeout is how long a new connection waits for its first frame.
	HelloTimeout time.Duration
	// Logger receives the causes of internal errors. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Name is the entry's label in its metrics (orbit_ws_connections,
	// orbit_ws_refused_total), such as "events"; NewEndpoint sets it to
	// the module's ID.
	Name string
	// Metrics is the node's registry; nil exposes nothing.
	Metrics *metrics.Registry

	// hooks are set by tests only.
	hooks hooks
}

// validate fills in the defaults and returns every error of c.
func (c *Config) validate() error {
	var errs []error
	if c.Subprotocol == "" {
		errs = append(errs, errors.New("wsx: config: Subprotocol is required"))
	}
	if c.Permission == "" {
		errs = append(errs, errors.New("wsx: config: Permission is required"))
	}
	if c.Authenticate == nil {
		errs = append(errs, errors.New("wsx: config: Authenticate is required"))
	}
	positive := func(name string, v *int, def int) {
		switch {
		case *v < 0:
			errs = append(errs, fmt.Errorf("wsx: config: %s must not be negative", name))
		case *v == 0:
			*v = def
		}
	}
	positive("MaxConns", &c.MaxConns, DefaultMaxConns)
	positive("InboundQueue", &c.InboundQueue, DefaultInboundQueue)
	positive("OutboundQueue", &c.OutboundQueue, DefaultOutboundQueue)
	duration := func(name string, v *time.Duration, def time.Duration) {
		switch {
		case *v < 0:
			errs = append(errs, fmt.Errorf("wsx: config: %s must not be negative", name))
		case *v == 0:
			*v = def
		}
	}
	duration("WriteTimeout", &c.WriteTimeout, DefaultWriteTimeout)
	duration("IdleTimeout", &c.IdleTimeout, DefaultIdleTimeout)
	duration("HelloTimeout", &c.HelloTimeout, DefaultHelloTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return errors.Join(errs...)
}

// Entry is one WebSocket entry of a node, such as /v1/events/connect. It
// checks and upgrades requests and counts the connections it has open. Its
// methods are safe for concurrent use.
type Entry struct {
	cfg      Config
	upgrader websocket.Upgrader

	mu       sync.Mutex
	open     int            // reserved slots: upgrades in progress and open connections
	conns    map[*Conn]bool // open connections
	draining bool           // Shutdown was called
	drained  chan struct{}  // closed when draining and open reaches 0
	serving  int            // running calls of Serve
	served   chan struct{}  // closed when draining and serving reaches 0

	// refused counts refused upgrades and hellos by C-7 code.
	refused *prometheus.CounterVec
}

// hooks let tests observe and stall a connection's goroutines. They are nil
// outside tests.
type hooks struct {
	// beforeWrite runs in the writer goroutine before each data frame is
	// written.
	beforeWrite func()
}

// NewEntry returns an Entry for cfg, or every configuration error at once.
func NewEntry(cfg Config) (*Entry, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Entry{cfg: cfg, conns: make(map[*Conn]bool), drained: make(chan struct{}), served: make(chan struct{})}
	e.refused = cfg.Metrics.CounterVec("ws_refused_total",
		"WebSocket connections refused, before the upgrade or at the hello, by entry and C-7 code.", "entry", "reason")
	cfg.Metrics.GaugeFunc("ws_connections", "Open WebSocket connections of the entry on this node.",
		prometheus.Labels{"entry": cfg.Name}, func() float64 {
			e.mu.Lock()
			defer e.mu.Unlock()
			return float64(len(e.conns))
		})
	e.upgrader = websocket.Upgrader{
		HandshakeTimeout:  cfg.WriteTimeout,
		Subprotocols:      []string{cfg.Subprotocol},
		CheckOrigin:       sameOrigin,
		EnableCompression: false,
		Error:             e.handshakeError,
	}
	return e, nil
}

// Upgrade checks r and upgrades it to a connection, or writes an HTTP reply
// in the envelope of C-6 and returns the error it reported. The checks run
// in this order, so that the client learns first what it must fix and last
// what it may simply retry:
//
//  1. the method is GET (405 METHOD_NOT_ALLOWED);
//  2. the URL has no query (400 INVALID_ARGUMENT, C-1, C-17);
//  3. an Origin header, when present, names the request's Host
//     (403 PERMISSION_DENIED): a cross-site page is refused before its
//     credentials are looked at;
//  4. the request is a WebSocket version 13 handshake offering the entry's
//     sub-protocol (426 PROTOCOL_REQUIRED, with Upgrade: websocket and
//     Sec-WebSocket-Version: 13) and with a well-formed Sec-WebSocket-Key
//     (400 INVALID_ARGUMENT);
//  5. the credential is valid (401 UNAUTHENTICATED) and holds the entry's
//     permission (403 PERMISSION_DENIED);
//  6. the node is not shutting down (503 UNAVAILABLE) and the entry has a
//     free connection slot (429 CAPACITY_EXCEEDED with Retry-After: 1).
//
// A failure of the upgrade itself after these checks, such as a response
// writer that cannot be hijacked, is a 500 INTERNAL.
//
// The upgrade echoes the sub-protocol, negotiates no compression even when
// the client offers it, sets no cookie and sends X-Request-ID when the
// request passed through httpx.Middleware. The Conn lives on after the
// handler returns; its context keeps r's values but not r's cancellation
// or deadline. Upgrade never blocks on the connection.
func (e *Entry) Upgrade(w http.ResponseWriter, r *http.Request) (*Conn, error) {
	p, err := e.check(r)
	if err == nil {
		err = e.reserve()
	}
	if err != nil {
		e.reject(w, r, err)
		return nil, err
	}
	var header http.Header
	if id := httpx.RequestID(r.Context()); id != "" {
		header = http.Header{"X-Request-Id": {id}}
	}
	ws, err := e.upgrader.Upgrade(w, r, header)
	if err != nil {
		// The upgrader has answered through handshakeError or, after
		// hijacking, closed the connection.
		e.release(nil)
		return nil, fmt.Errorf("wsx: upgrade: %w", err)
	}
	// The HTTP server's read deadline for the request would otherwise
	// end the connection; the reader keeps its own timers.
	_ = ws.NetConn().SetReadDeadline(time.Time{})
	c := newConn(e, ws, r, p)
	e.mu.Lock()
	e.conns[c] = true
	draining := e.draining
	e.mu.Unlock()
	if draining {
		c.Close(CloseGoingAway, "server shutting down")
	}
	c.start()
	return c, nil
}

// check runs the checks 1 to 5 of Upgrade and returns the principal.
func (e *Entry) check(r *http.Request) (*auth.Principal, error) {
	if r.Method != http.MethodGet {
		return nil, httpx.Errorf(httpx.CodeMethodNotAllowed, "method not allowed for this route")
	}
	// The rule of every endpoint without parameters: any parameter, and
	// a bare '?', is 400.
	if _, err := httpx.Query(r); err != nil {
		return nil, err
	}
	if !sameOrigin(r) {
		return nil, httpx.Errorf(httpx.CodePermissionDenied, "cross-origin WebSocket requests are not allowed")
	}
	if !websocket.IsWebSocketUpgrade(r) || !headerHasToken(r.Header, "Sec-Websocket-Version", "13") ||
		!slices.Contains(websocket.Subprotocols(r), e.cfg.Subprotocol) {
		return nil, httpx.Errorf(httpx.CodeProtocolRequired, "a WebSocket version 13 upgrade with sub-protocol %s is required", e.cfg.Subprotocol)
	}
	if !validKey(r.Header.Values("Sec-Websocket-Key")) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "Sec-WebSocket-Key must be 16 bytes in base64")
	}
	p, err := e.cfg.Authenticate(r)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("wsx: authenticate returned no principal and no error")
	}
	httpx.SetCredential(r, p.CredentialID)
	if !p.Can(e.cfg.Permission) {
		return nil, httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", e.cfg.Permission)
	}
	return p, nil
}

// reject writes the HTTP reply for a failed check.
func (e *Entry) reject(w http.ResponseWriter, r *http.Request, err error) {
	e.countRefused(err)
	var he *httpx.Error
	if errors.As(err, &he) {
		switch he.Code {
		case httpx.CodeMethodNotAllowed:
			w.Header().Set("Allow", http.MethodGet)
		case httpx.CodeProtocolRequired:
			w.Header().Set("Upgrade", "websocket")
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
	}
	httpx.WriteError(w, r, err)
}

// countRefused counts a refused connection under the C-7 code of err
// (INTERNAL for an error without one).
func (e *Entry) countRefused(err error) {
	code := httpx.CodeInternal
	var he *httpx.Error
	if errors.As(err, &he) {
		code = he.Code
	}
	e.refused.WithLabelValues(e.cfg.Name, string(code)).Inc()
}

// handshakeError answers the upgrader's own refusals in the envelope.
func (e *Entry) handshakeError(w http.ResponseWriter, r *http.Request, status int, reason error) {
	var err error
	switch status {
	case http.StatusBadRequest:
		err = httpx.Errorf(httpx.CodeInvalidArgument, "invalid WebSocket handshake")
	case http.StatusForbidden:
		err = httpx.Errorf(httpx.CodePermissionDenied, "cross-origin WebSocket requests are not allowed")
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodGet)
		err = httpx.Errorf(httpx.CodeMethodNotAllowed, "method not allowed for this route")
	default:
		err = fmt.Errorf("wsx: upgrade: %w", reason)
	}
	e.countRefused(err)
	httpx.WriteError(w, r, err)
}

// openConns returns the number of slots taken.
func (e *Entry) openConns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.open
}

// reserve takes a connection slot.
func (e *Entry) reserve() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.draining:
		return httpx.Errorf(httpx.CodeUnavailable, "server is shutting down")
	case e.open >= e.cfg.MaxConns:
		return httpx.Errorf(httpx.CodeCapacityExceeded, "too many WebSocket connections on this node")
	}
	e.open++
	return nil
}

// release gives back the slot of c, or of a failed upgrade when c is nil.
func (e *Entry) release(c *Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c != nil {
		delete(e.conns, c)
	}
	e.open--
	if e.draining && e.open == 0 {
		close(e.drained)
	}
}

// Shutdown refuses new upgrades with 503 UNAVAILABLE, closes every open
// connection with 1001 and waits until all of them are torn down and every
// Serve has returned, or until ctx ends, whose error it then returns. It is
// idempotent and safe to call concurrently; every call waits.
func (e *Entry) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if !e.draining {
		e.draining = true
		if e.open == 0 {
			close(e.drained)
		}
		if e.serving == 0 {
			close(e.served)
		}
	}
	conns := make([]*Conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseGoingAway, "server shutting down")
	}
	for _, done := range []chan struct{}{e.drained, e.served} {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("wsx: shutdown: %w", ctx.Err())
		}
	}
	return nil
}

// sameOrigin reports whether r has no Origin header or exactly one whose
// host equals the request's Host, ignoring ASCII case. An opaque origin
// ("null") is cross-origin.
func sameOrigin(r *http.Request) bool {
	origins := r.Header.Values("Origin")
	switch len(origins) {
	case 0:
		return true
	case 1:
	default:
		return false
	}
	u, err := url.Parse(origins[0])
	if err != nil || u.Host == "" {
		return false
	}
	return asciiEqualFold(u.Host, r.Host)
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// validKey reports whether the Sec-WebSocket-Key header is one base64
// encoding of 16 bytes (RFC 6455 §4.1).
func validKey(values []string) bool {
	if len(values) != 1 {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(values[0])
	return err == nil && len(b) == 16
}

// headerHasToken reports whether a comma-separated header has token,
// ignoring ASCII case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if asciiEqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}
