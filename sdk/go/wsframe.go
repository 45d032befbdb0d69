package orbit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// The orbit.workers.v1 protocol (spec 03, C-17, C-18).
const (
	workerProtocol  = "orbit.workers.v1"
	protocolVersion = "1"
	// maxFrameBytes is the largest WebSocket message either side accepts.
	maxFrameBytes = 512 << 10
	// maxResultBytes is the largest result a worker reports, as for task
	// input.
	maxResultBytes = 256 << 10
	// maxFrameDepth is the deepest nesting of objects and arrays the
	// server accepts in a frame, the envelope being level 1; a deeper frame
	// closes the connection.
	maxFrameDepth = 64
	// maxResultDepth is the deepest result a task.complete can carry: the
	// envelope and the body take two of maxFrameDepth's levels.
	maxResultDepth = maxFrameDepth - 2
)

// Frame types of orbit.workers.v1.
const (
	frameHello     = "worker.hello"
	frameWelcome   = "worker.welcome"
	framePing      = "worker.ping"
	frameAssign    = "task.assign"
	frameCancel    = "task.cancel"
	frameComplete  = "task.complete"
	frameRelease   = "task.release"
	frameAck       = "ack"
	frameTypeError = "error"
)

// Outcomes a worker reports in task.complete.
const (
	outcomeSucceeded   = "succeeded"
	outcomeFailed      = "failed"
	outcomeNeedsReview = "needs_review"
	outcomeCancelled   = "cancelled"
)

// frame is the envelope of every WebSocket message (C-18).
type frame struct {
	ProtocolVersion string          `json:"protocol_version"`
	Type            string          `json:"type"`
	MessageID       string          `json:"message_id"`
	SessionID       string          `json:"session_id,omitempty"`
	ReplyTo         string          `json:"reply_to,omitempty"`
	Body            json.RawMessage `json:"body,omitempty"`
	Error           *frameErr       `json:"error,omitempty"`

	// assign and ack are the decoded body of a task.assign or of the ack
	// to an event.ack that was decoded with its envelope, or nil.
	assign *assignBody
	ack    *AckResult
}

type frameErr struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError returns the error of an error frame as an *APIError.
func (f *frame) apiError() *APIError {
	if f.Error == nil {
		return &APIError{Code: CodeInternal, Message: "error frame without an error"}
	}
	return &APIError{Code: f.Error.Code, Message: f.Error.Message}
}

// newFrame returns a client frame with a fresh message id and body encoded
// from v.
func newFrame(typ, sessionID string, body any) (frame, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return frame{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	return frame{ProtocolVersion: protocolVersion, Type: typ, MessageID: newMessageID(), SessionID: sessionID, Body: raw}, nil
}

// newMessageID returns 32 random lowercase hexadecimal characters.
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}

type helloBody struct {
	QueueID    string `json:"queue_id"`
	Capacity   int    `json:"capacity"`
	WorkerName string `json:"worker_name,omitempty"`
	// Resume holds the proofs of the leases whose handlers still run from
	// an earlier connection, so that the new session adopts them; omitted
	// when there are none.
	Resume []proof `json:"resume,omitempty"`
}

type welcomeBody struct {
	SessionID           string    `json:"session_id"`
	QueueID             string    `json:"queue_id"`
	Capacity            int       `json:"capacity"`
	LeaseDurationMS     int64     `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64     `json:"heartbeat_interval_ms"`
	ServerTime          time.Time `json:"server_time"`
	// Resumed lists the attempts of the hello's resume that the session
	// adopted. A server without resume support omits it.
	Resumed []string `json:"resumed"`
}

type assignBody struct {
	Task struct {
		ID          string          `json:"id"`
		QueueID     string          `json:"queue_id"`
		Revision    uint64          `json:"revision,string"`
		Input       json.RawMessage `json:"input"`
		Attempts    int             `json:"attempts"`
		MaxAttempts int             `json:"max_attempts"`
		Idempotent  bool            `json:"idempotent"`
	} `json:"task"`
	AttemptID   string        `json:"attempt_id"`
	Epoch       uint64        `json:"epoch,string"`
	LeaseUntil  time.Time     `json:"lease_until"`
	LeaseSecret string        `json:"lease_secret"`
	Trace       *traceContext `json:"trace"`
}

type cancelBody struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
}

// proof identifies a lease in task.complete and task.release.
type proof struct {
	TaskID      string `json:"task_id"`
	AttemptID   string `json:"attempt_id"`
	Epoch       uint64 `json:"epoch,string"`
	LeaseSecret string `json:"lease_secret"`
}

type completeBody struct {
	proof
	Outcome string          `json:"outcome"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *TaskError      `json:"error,omitempty"`
}

type releaseBody struct {
	proof
	Reason string `json:"reason"`
}

// completeAck is the body of the ack to task.complete.
type completeAck struct {
	TaskID       string `json:"task_id"`
	AttemptID    string `json:"attempt_id"`
	Outcome      string `json:"outcome"`
	State        string `json:"state"`
	Revision     uint64 `json:"revision,string"`
	Deduplicated bool   `json:"deduplicated"`
}

// session is one welcomed connection. Only the worker's loop writes to it;
// a reader goroutine turns incoming messages into frames.
type session struct {
	ws          *websocket.Conn
	id          string
	readTimeout time.Duration
	frames      chan frame    // closed by the reader when it stops
	stop        chan struct{} // closed to stop the reader
	err         error         // why the reader stopped; set before frames is closed
	ticker      *time.Ticker  // the heartbeat
	since       time.Time     // when the session was welcomed
	inflight    map[string]*report
}

// writeTimeout bounds every write of a frame.
const writeTimeout = 10 * time.Second

// newSession returns the session a welcome opened on ws; its reader is not
// started yet.
func newSession(ws *websocket.Conn, w welcomeBody) *session {
	hb := time.Duration(w.HeartbeatIntervalMS) * time.Millisecond
	return &session{
		ws: ws, id: w.SessionID,
		// Every ping is answered, so silence for two intervals and a margin
		// means the connection is gone.
		readTimeout: 2*hb + 5*time.Second,
		frames:      make(chan frame),
		stop:        make(chan struct{}),
		ticker:      time.NewTicker(hb),
		since:       time.Now(),
		inflight:    make(map[string]*report),
	}
}

// read runs in its own goroutine until the connection fails or stop is
// closed, then closes frames.
func (s *session) read() {
	defer close(s.frames)
	for {
		_ = s.ws.SetReadDeadline(time.Now().Add(s.readTimeout))
		f, err := readWorkerFrame(s.ws)
		if err != nil {
			s.err = err
			return
		}
		select {
		case s.frames <- f:
		case <-s.stop:
			s.err = errors.New("connection closed by the worker")
			return
		}
	}
}

// readWorkerFrame reads one message of the workers protocol and decodes
// its envelope.
func readWorkerFrame(ws *websocket.Conn) (frame, error) {
	b, err := readMessage(ws, nil)
	if err != nil {
		return frame{}, err
	}
	return parseWorkerFrame(b)
}

// parseWorkerFrame decodes the envelope of message b, and the body too
// when b is a task.assign (see decodeAssignOnce).
func parseWorkerFrame(b []byte) (frame, error) {
	if f, ok := decodeAssignOnce(b); ok {
		return f, nil
	}
	return parseFrame(b)
}

// write sends f with a bounded deadline.
func (s *session) write(f frame) error {
	return writeFrame(s.ws, f, nil)
}

// teardown closes the connection abruptly and waits for the reader.
func (s *session) teardown() {
	s.ticker.Stop()
	close(s.stop)
	_ = s.ws.Close()
	for range s.frames {
	}
}

// closeWait bounds how long a normal close waits for the server's reply.
const closeWait = time.Second

// closeNormally sends a close frame with code 1000, waits briefly for the
// server to answer it and closes the connection. It returns the frames that
// arrived meanwhile.
func (s *session) closeNormally() []frame {
	_ = s.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(closeWait))
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	var late []frame
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				s.teardown()
				return late
			}
			late = append(late, f)
		case <-timer.C:
			s.teardown()
			return late
		}
	}
}

// Directions a trace function is called with.
const (
	// FrameSent marks a frame the client wrote.
	FrameSent = "sent"
	// FrameReceived marks a frame the client read.
	FrameReceived = "received"
)

// traceFunc receives the text of every frame written (FrameSent) or read
// (FrameReceived); nil traces nothing.
type traceFunc func(dir string, frame []byte)

// writeFrame encodes f and writes it as one text message within
// writeTimeout.
func writeFrame(ws *websocket.Conn, f frame, trace traceFunc) error {
	return writeFrameBy(ws, f, time.Now().Add(writeTimeout), trace)
}

// writeFrameBy encodes f and writes it as one text message before
// deadline. A write that fails or times out leaves the connection unusable.
func writeFrameBy(ws *websocket.Conn, f frame, deadline time.Time, trace traceFunc) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	if len(b) > maxFrameBytes {
		return fmt.Errorf("%s frame of %d bytes exceeds %d", f.Type, len(b), maxFrameBytes)
	}
	if trace != nil {
		trace(FrameSent, b)
	}
	_ = ws.SetWriteDeadline(deadline)
	return ws.WriteMessage(websocket.TextMessage, b)
}

// readFrame reads one message and decodes its envelope.
func readFrame(ws *websocket.Conn, trace traceFunc) (frame, error) {
	b, err := readMessage(ws, trace)
	if err != nil {
		return frame{}, err
	}
	return parseFrame(b)
}

// readMessage reads one text message, after passing it to trace.
func readMessage(ws *websocket.Conn, trace traceFunc) ([]byte, error) {
	typ, b, err := ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	if trace != nil && typ == websocket.TextMessage {
		trace(FrameReceived, b)
	}
	if typ != websocket.TextMessage {
		return nil, errors.New("server sent a binary frame")
	}
	return b, nil
}

// parseFrame decodes the envelope of message b and checks its protocol
// version; the body stays undecoded.
func parseFrame(b []byte) (frame, error) {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, fmt.Errorf("server sent an invalid frame: %w", err)
	}
	if f.ProtocolVersion != protocolVersion {
		return frame{}, fmt.Errorf("server sent protocol_version %q, want %q", f.ProtocolVersion, protocolVersion)
	}
	return f, nil
}

// upgradeError turns a failed WebSocket handshake into an *APIError. The
// server answers it in the usual envelope; gorilla/websocket keeps the
// first kilobyte of the body.
func upgradeError(resp *http.Response) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	err := decodeEnvelope(resp, raw, nil)
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return &APIError{Status: resp.StatusCode, Message: "WebSocket upgrade refused with status " + resp.Status,
		RequestID: resp.Header.Get("X-Request-ID")}
}

// retryAfter returns the Retry-After delay of resp in seconds, or 0.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// websocketURL returns the ws:// or wss:// URL of path under the http or
// https base URL.
func websocketURL(base *url.URL, path string) string {
	u := endpoint(base, path, nil)
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	return u.String()
}

// newDialer returns a copy of d (nil: a dialer with the proxy from the
// environment) that offers only protocol, never compression, and sends no
// cookies.
func newDialer(d *websocket.Dialer, protocol string) *websocket.Dialer {
	c := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 45 * time.Second}
	if d != nil {
		c = *d
	}
	c.Subprotocols = []string{protocol}
	c.EnableCompression = false
	c.Jar = nil
	return &c
}

// upgradeHeader returns the headers of an upgrade request with token.
func upgradeHeader(token string) http.Header {
	return http.Header{
		"Authorization": {"Bearer " + token},
		"User-Agent":    {defaultUserAgent},
	}
}

// handshakeParams describe one connection attempt: the upgrade, the hello
// frame and the reply it waits for.
type handshakeParams struct {
	who      string // prefixes errors, such as "orbit worker"
	dialer   *websocket.Dialer
	url      string
	header   http.Header
	protocol string
	hello    frame
	welcome  string // the frame type that accepts the hello
	timeout  time.Duration
	trace    traceFunc
}

// handshake dials, sends the hello and waits for the welcome. It returns
// the connection, with a read limit and no reader yet, and the welcome.
// A refused upgrade and an error frame answering the hello are *APIError
// (the first with its HTTP Status, the second with Status 0); retryAfter is
// the refusal's Retry-After, the third result. Cancelling ctx aborts the
// attempt.
func handshake(ctx context.Context, p handshakeParams) (*websocket.Conn, frame, time.Duration, error) {
	ws, resp, err := p.dialer.DialContext(ctx, p.url, p.header)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			return nil, frame{}, retryAfter(resp), upgradeError(resp)
		}
		return nil, frame{}, 0, fmt.Errorf("%s: dial: %w", p.who, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = ws.Close() })
	defer stop()
	fail := func(err error) (*websocket.Conn, frame, time.Duration, error) {
		closeNow(ws)
		return nil, frame{}, 0, err
	}
	if ws.Subprotocol() != p.protocol {
		return fail(fmt.Errorf("%s: server chose sub-protocol %q, want %q", p.who, ws.Subprotocol(), p.protocol))
	}
	ws.SetReadLimit(maxFrameBytes)
	if err := writeFrame(ws, p.hello, p.trace); err != nil {
		return fail(fmt.Errorf("%s: send %s: %w", p.who, p.hello.Type, err))
	}
	_ = ws.SetReadDeadline(time.Now().Add(p.timeout))
	f, err := readFrame(ws, p.trace)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fail(fmt.Errorf("%s: wait for %s: %w", p.who, p.welcome, err))
	}
	switch {
	case f.Type == frameTypeError:
		return fail(f.apiError())
	case f.Type != p.welcome || (f.ReplyTo != "" && f.ReplyTo != p.hello.MessageID):
		return fail(fmt.Errorf("%s: expected %s in reply to %s, got %s", p.who, p.welcome, p.hello.Type, f.Type))
	}
	if !stop() {
		_ = ws.Close()
		return nil, frame{}, 0, ctx.Err()
	}
	_ = ws.SetReadDeadline(time.Time{})
	return ws, f, 0, nil
}

// closeNow sends a close frame with code 1000, without waiting for the
// answer, and closes the connection.
func closeNow(ws *websocket.Conn) {
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(closeWait))
	_ = ws.Close()
}

// handshakeFatal reports whether reconnecting cannot help after a failed
// handshake: the upgrade was refused with 400, 401, 403, 404 or 426, or the
// hello was answered with UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND or
// INVALID_ARGUMENT.
func handshakeFatal(err error) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	if e.Status != 0 {
		switch e.Status {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUpgradeRequired:
			return true
		}
		return false
	}
	return isFatal(e.Code) || e.Code == CodeInvalidArgument
}

// connect dials, says hello with the proofs of resume (the leases still
// running from an earlier connection) and waits for the welcome.
func (w *Worker) connect(ctx context.Context, resume []proof) connectResult {
	hello, err := newFrame(frameHello, "", helloBody{QueueID: w.cfg.QueueID, Capacity: w.cfg.Capacity, WorkerName: w.cfg.WorkerName, Resume: resume})
	if err != nil {
		return connectResult{err: fmt.Errorf("orbit worker: %w", err)}
	}
	ws, f, retry, err := handshake(ctx, handshakeParams{
		who: "orbit worker", dialer: w.dialer, url: w.url, header: w.header, protocol: workerProtocol,
		hello: hello, welcome: frameWelcome, timeout: welcomeTimeout,
	})
	if err != nil {
		return connectResult{err: err, fatal: handshakeFatal(err), retryAfter: retry}
	}
	var welcome welcomeBody
	if err := json.Unmarshal(f.Body, &welcome); err != nil {
		closeNow(ws)
		return connectResult{err: fmt.Errorf("orbit worker: invalid welcome: %w", err)}
	}
	if welcome.SessionID == "" || welcome.HeartbeatIntervalMS <= 0 {
		closeNow(ws)
		return connectResult{err: errors.New("orbit worker: welcome lacks session_id or heartbeat_interval_ms")}
	}
	s := newSession(ws, welcome)
	go s.read()
	return connectResult{sess: s, resume: resume, resumed: welcome.Resumed}
}
