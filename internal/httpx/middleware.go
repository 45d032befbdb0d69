package httpx

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
)

// defaultDeadline is the management deadline of C-12.
const defaultDeadline = 8 * time.Second

// bodyGrace is how much longer than the deadline reading the request may
// take. The connection's read deadline also ends the server's wait for the
// next bytes after the body, which cancels the request's context: a little
// later than the deadline, the handler sees DeadlineExceeded, not Canceled.
const bodyGrace = time.Second

// MiddlewareOptions configures Middleware.
type MiddlewareOptions struct {
	// Logger receives the access log and the causes of INTERNAL errors.
	// Nil means slog.Default().
	Logger *slog.Logger
	// Deadline bounds every request that is not wrapped in NoDeadline.
	// Zero or negative means the 8 seconds of C-12.
	Deadline time.Duration
	// Observe, when set, is called once per request after its response,
	// for the request metrics (O-2): see RequestObservation.
	Observe func(RequestObservation)
}

// RouteUnmatched is the route of a request that matched no route.
const RouteUnmatched = "unmatched"

// CodeOK is the code of a request answered without an error.
const CodeOK Code = "OK"

// RequestObservation is what Middleware reports of one request.
type RequestObservation struct {
	// Route is the path template that matched, such as
	// "/v1/tasks/{id}", or RouteUnmatched: never the path itself.
	Route string
	// Code is the C-7 code the request was answered with, or CodeOK.
	Code Code
	// Duration is the time from the request's arrival to its response.
	Duration time.Duration
	// Upgraded is true for a connection that was hijacked (a WebSocket),
	// whose Duration is the connection's life, not a response time.
	Upgraded bool
}

// requestState is what Middleware keeps about one request in its context.
type requestState struct {
	id     string
	logger *slog.Logger
	// base is the request context before the deadline was applied;
	// NoDeadline takes its cancellation from it.
	base context.Context
	// next is the handler Middleware wraps, normally the router.
	next http.Handler

	// mu guards what the handler reports for the request's log line.
	mu sync.Mutex
	// code is the C-7 code of the error the request was answered with.
	code Code
	// credentialID is the authenticated caller's credential, never a token.
	credentialID string
}

// SetCredential records the credential that r was authenticated as, for the
// request's log line. It is called by the authentication middleware and the
// WebSocket upgrades; outside Middleware it does nothing.
func SetCredential(r *http.Request, credentialID string) {
	if st := stateFrom(r.Context()); st != nil {
		st.mu.Lock()
		st.credentialID = credentialID
		st.mu.Unlock()
	}
}

// setCode records the code of the error that answers the request of st.
func (st *requestState) setCode(code Code) {
	if st != nil {
		st.mu.Lock()
		st.code = code
		st.mu.Unlock()
	}
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// RequestID returns the id Middleware assigned to the request that ctx
// belongs to, or "" if the request did not pass through Middleware.
func RequestID(ctx context.Context) string {
	if st := stateFrom(ctx); st != nil {
		return st.id
	}
	return ""
}

// requestID returns the id of r, making one up (and setting no state) when
// r did not pass through Middleware, so that the envelope is still valid.
func requestID(r *http.Request) string {
	if id := RequestID(r.Context()); id != "" {
		return id
	}
	return newRequestID()
}

// logger returns the logger of request id: the one Middleware made for it,
// or the default logger when the request did not pass through Middleware.
// Either way its records carry the request id.
func logger(r *http.Request, id string) *slog.Logger {
	if st := stateFrom(r.Context()); st != nil {
		return st.logger
	}
	return slog.Default().With(slog.String("request_id", id))
}

// newRequestID returns 32 lowercase hexadecimal characters from crypto/rand.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}

// Middleware wraps the whole router and gives every request the conventions
// of C-1, C-6 and C-12:
//
//   - it assigns a request id (32 lowercase hex characters) and sets the
//     X-Request-ID, Cache-Control: no-store and Content-Type: application/json
//     headers before next runs, so that every response has them, including
//     404, 405 and recovered panics;
//   - it rejects with 400 INVALID_ARGUMENT any request whose URL query has a
//     parameter named like a credential (C-1), before routing;
//   - it bounds the request context with opts.Deadline, except for routes
//     wrapped in NoDeadline, and reading the request (its body, and what
//     the server discards of it after the handler) with opts.Deadline plus
//     one second, for every route: a client that sends its body slowly
//     cannot hold a request open, authenticated or not. A WebSocket
//     upgrade must clear the read deadline of the connection it hijacks;
//   - it recovers panics as 500 INTERNAL (or aborts the connection when the
//     response had already started);
//   - it answers INTERNAL when a handler returns without writing anything;
//   - it logs one line per request with the method, the route template, the
//     status, the duration, the request id and the remote address. It never
//     logs headers, query strings, paths or bodies.
//
// When next is a *mux.Router, the route template is found by matching the
// request against it, and MethodNotAllowed can fill in the Allow header.
// The response writer passed to next supports http.Hijacker, http.Flusher
// and Unwrap for http.ResponseController, so WebSocket upgrades work.
func Middleware(opts MiddlewareOptions, next http.Handler) http.Handler {
	base := opts.Logger
	if base == nil {
		base = slog.Default()
	}
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = defaultDeadline
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// ErrNotSupported (HTTP/2 before Go supports it there, test
		// recorders) leaves the request unbounded, as before.
		_ = http.NewResponseController(w).SetReadDeadline(start.Add(deadline + bodyGrace))
		id := newRequestID()
		h := w.Header()
		h.Set("X-Request-ID", id)
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Type", "application/json")

		st := &requestState{id: id, logger: base.With(slog.String("request_id", id)), base: r.Context(), next: next}
		ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), stateKey{}, st), deadline)
		defer cancel()
		r = r.WithContext(ctx)
		rw := &responseWriter{ResponseWriter: w}

		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				st.logger.LogAttrs(ctx, slog.LevelError, "panic serving request",
					slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
				if rw.started() {
					p = http.ErrAbortHandler
				} else {
					clear(w.Header())
					st.setCode(CodeInternal)
					writeError(rw, id, &Error{Code: CodeInternal, Message: internalMessage})
					p = nil
				}
			}
			logRequest(st, r, next, rw, time.Since(start), opts.Observe)
			if p != nil {
				panic(p)
			}
		}()

		if credentialInQuery(r.URL.RawQuery) {
			st.setCode(CodeInvalidArgument)
			writeError(rw, id, &Error{Code: CodeInvalidArgument, Message: "credentials must not be sent in the URL"})
			return
		}
		next.ServeHTTP(rw, r)
		if !rw.started() {
			st.setCode(CodeInternal)
			writeError(rw, id, internalError(r, id, "handler returned without writing a response"))
		}
	})
}

// logRequest writes the access log line of one request
// and reports it to observe, when set.
func logRequest(st *requestState, r *http.Request, next http.Handler, rw *responseWriter, d time.Duration, observe func(RequestObservation)) {
	status := rw.status
	if rw.hijacked && status == 0 {
		status = http.StatusSwitchingProtocols
	}
	route := routeTemplate(next, r)
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", status),
	}
	st.mu.Lock()
	code := st.code
	if st.code != "" {
		attrs = append(attrs, slog.String("code", string(st.code)))
	}
	if st.credentialID != "" {
		attrs = append(attrs, slog.String("credential_id", st.credentialID))
	}
	st.mu.Unlock()
	if observe != nil {
		if route == "" {
			route = RouteUnmatched
		}
		if code == "" {
			code = CodeOK
		}
		observe(RequestObservation{Route: route, Code: code, Duration: d, Upgraded: rw.hijacked})
	}
	attrs = append(attrs, slog.Duration("duration", d), slog.String("remote_addr", r.RemoteAddr))
	st.logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

// routeTemplate returns the path template of the route that r matches when
// next is a *mux.Router, or "" when there is none.
func routeTemplate(next http.Handler, r *http.Request) string {
	router, ok := next.(*mux.Router)
	if !ok {
		return ""
	}
	var match mux.RouteMatch
	if !router.Match(r, &match) || match.MatchErr != nil || match.Route == nil {
		return ""
	}
	tpl, err := match.Route.GetPathTemplate()
	if err != nil {
		return ""
	}
	return tpl
}

// credentialNames are the normalised query parameter names that C-1 forbids:
// lower case, without '-', '_' and '.'.
var credentialNames = map[string]bool{
	"accesstoken":   true,
	"token":         true,
	"leasesecret":   true,
	"secret":        true,
	"apikey":        true,
	"key":           true,
	"authorization": true,
	"password":      true,
}

// credentialInQuery reports whether the raw query has a parameter whose
// name, compared case-insensitively and ignoring '-', '_' and '.', is one of
// credentialNames or ends in "token" or "secret". Names that cannot be
// unescaped are checked as they are.
func credentialInQuery(rawQuery string) bool {
	for rawQuery != "" {
		var part string
		part, rawQuery, _ = strings.Cut(rawQuery, "&")
		for part := range strings.SplitSeq(part, ";") {
			name, _, _ := strings.Cut(part, "=")
			if unescaped, err := url.QueryUnescape(name); err == nil {
				name = unescaped
			}
			if isCredentialName(name) {
				return true
			}
		}
	}
	return false
}

func isCredentialName(name string) bool {
	n := strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.':
			return -1
		}
		return r
	}, strings.ToLower(name))
	return credentialNames[n] || strings.HasSuffix(n, "token") || strings.HasSuffix(n, "secret")
}

// NoDeadline marks a handler, normally a WebSocket upgrade route, to which
// the Middleware deadline does not apply. The handler still sees the request
// id, the route variables and every other context value, and its context is
// still canceled when the client goes away or the server shuts down. Wrap
// the route handler, not the router:
//
//	router.Handle("/v1/events/connect", httpx.NoDeadline(connect)).Methods(http.MethodGet)
//
// Outside Middleware it changes nothing.
func NoDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		if st == nil {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
		stop := context.AfterFunc(st.base, func() { cancel(context.Cause(st.base)) })
		defer func() {
			stop()
			cancel(nil)
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// responseWriter records the status of a response for the access log and
// passes hijacking and flushing through to the writer it wraps.
type responseWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

// started reports whether the response can no longer be replaced.
func (w *responseWriter) started() bool {
	return w.status != 0 || w.hijacked
}

// WriteHeader records the first final status and forwards every call.
func (w *responseWriter) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write records an implicit 200 before the first write.
func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends buffered data to the client, implying a 200 if no status was
// written.
func (w *responseWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack lets the caller take over the connection, as WebSocket upgrades do.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap returns the wrapped writer for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}

var (
	_ http.Hijacker = (*responseWriter)(nil)
	_ http.Flusher  = (*responseWriter)(nil)
)
