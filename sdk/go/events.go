package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The orbit.events.v1 protocol (seed 001 §5–7, spec 05).
const (
	eventsProtocol = "orbit.events.v1"

	frameEventsHello   = "events.hello"
	frameEventsWelcome = "events.welcome"
	frameEventsPing    = "events.ping"
	frameEventDeliver  = "event.deliver"
	frameEventAck      = "event.ack"
)

// Limits of an event connection's capacity.
const (
	DefaultEventCapacity = 1
	MaxEventCapacity     = 32
)

// EventConnConfig configures DialEvents.
type EventConnConfig struct {
	// BaseURL is the server's http or https URL; the connection goes to
	// ws:// or wss:// {BaseURL}/v1/events/connect.
	BaseURL string
	// Token is the bearer token; its credential needs events:consume and
	// must own the subscription.
	Token string
	// SubscriptionID names the subscription to consume.
	SubscriptionID string
	// Capacity is how many deliveries the connection may hold leased at
	// once, 1 to MaxEventCapacity; zero means DefaultEventCapacity. It
	// cannot change while the connection lasts.
	Capacity int
	// Dialer opens the WebSocket connection; nil means a dialer with the
	// proxy from the environment. A copy is used, with the
	// orbit.events.v1 sub-protocol, no compression and no cookie jar.
	Dialer *websocket.Dialer
	// Trace, when not nil, is a diagnostic hook that receives the text of
	// every frame the connection writes (dir FrameSent) and reads (dir
	// FrameReceived), from several goroutines at once; it must not modify
	// the slice. Frames carry lease secrets, which prove a delivery to the
	// server: never log or keep traced frames in production.
	Trace func(dir string, frame []byte)
}

// Welcome is the server's events.welcome: the session it opened for the
// connection and the rules that apply to it.
type Welcome struct {
	// SessionID identifies this connection only; a reconnection gets a
	// new one.
	SessionID      string
	SubscriptionID string
	Capacity       int
	// LeaseDuration is how long each delivery's lease lasts; there is no
	// lease extension, so a receiver persists an event within it.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the client should call Ping.
	HeartbeatInterval time.Duration
	ServerTime        time.Time
	// Enabled is false while the subscription is paused: nothing new is
	// delivered, but held deliveries may still be acknowledged.
	Enabled bool
}

// AckProof proves the lease of one delivery: the delivery, the lease
// epoch and the lease's secret. Only the latest lease of a delivery
// acknowledges it. A proof whose acknowledgement was not confirmed may be
// sent again, on any later connection of the same credential and
// subscription, until the server answers it; keep it in durable storage
// when the receiver may restart meanwhile.
//
// Its JSON form is the body of event.ack. String, GoString and LogValue
// leave the secret out.
type AckProof struct {
	DeliveryID  string `json:"delivery_id"`
	Epoch       uint64 `json:"epoch,string"`
	LeaseSecret string `json:"lease_secret"`
}

// String names the delivery and epoch, never the secret.
func (p AckProof) String() string {
	return fmt.Sprintf("delivery %s epoch %d", p.DeliveryID, p.Epoch)
}

// GoString is String, so %#v does not reveal the secret either.
func (p AckProof) GoString() string { return p.String() }

// LogValue logs the delivery and epoch, never the secret.
func (p AckProof) LogValue() slog.Value {
	return slog.GroupValue(slog.String("delivery_id", p.DeliveryID), slog.Uint64("epoch", p.Epoch))
}

// Delivery is one event.deliver: a leased delivery, its event and the
// proof that acknowledges it. The same event may be delivered more than
// once (at least once, E-12); receivers deduplicate by Event.ID.
type Delivery struct {
	EventDelivery
	Event ResultEvent
	// EventJSON is the event's JSON text exactly as the server sent it,
	// for receivers that store the event verbatim; it keeps members that
	// ResultEvent does not know.
	EventJSON json.RawMessage
	// Proof acknowledges this lease with Ack.
	Proof AckProof

	// trace is the trace context of the event's task from event.deliver,
	// or nil.
	trace *traceContext
}

// AckResult is the server's answer to an acknowledgement.
type AckResult struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Epoch      uint64 `json:"epoch,string"`
	// AcknowledgedAt is the time of the first valid acknowledgement.
	AcknowledgedAt time.Time `json:"acknowledged_at"`
	// Deduplicated is set when the delivery had already been
	// acknowledged with this proof, for example when the first answer was
	// lost.
	Deduplicated bool `json:"deduplicated"`
}

// PingResult is the server's answer to Ping.
type PingResult struct {
	ServerTime time.Time `json:"server_time"`
	// Enabled is false while the subscription is paused.
	Enabled bool `json:"enabled"`
}

type eventsHelloBody struct {
	SubscriptionID string `json:"subscription_id"`
	Capacity       int    `json:"capacity"`
}

type eventsWelcomeBody struct {
	SessionID           string    `json:"session_id"`
	SubscriptionID      string    `json:"subscription_id"`
	Capacity            int       `json:"capacity"`
	LeaseDurationMS     int64     `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64     `json:"heartbeat_interval_ms"`
	ServerTime          time.Time `json:"server_time"`
	Enabled             bool      `json:"enabled"`
}

type deliverBody struct {
	Delivery    EventDelivery   `json:"delivery"`
	Event       json.RawMessage `json:"event"`
	LeaseSecret string          `json:"lease_secret"`
	Trace       *traceContext   `json:"trace"`
}

// errEventConnClosed is returned once Close was called.
var errEventConnClosed = fmt.Errorf("orbit: event connection closed: %w", net.ErrClosed)

// EventConn is one orbit.events.v1 connection to a subscription, opened by
// DialEvents. A reader goroutine receives the server's frames: deliveries
// wait in order for Next, and replies go to the Ack or Ping call they
// answer (by reply_to). Deliveries wait without bound until Next takes
// them; the server sends at most Capacity leases at a time, plus
// redeliveries of leases that ran out. Next is meant for one goroutine;
// Ack, Ping, Welcome, Done and Close are safe for concurrent use.
//
// The connection does not send heartbeats by itself: call Ping about every
// Welcome().HeartbeatInterval, or the server closes the connection after
// 60 seconds without a client frame. EventConsumer does all of this, and
// reconnects; EventConn is the building block for callers that need the
// protocol's steps themselves.
type EventConn struct {
	ws      *websocket.Conn
	welcome Welcome
	trace   traceFunc

	writeMu sync.Mutex

	mu      sync.Mutex
	pending map[string]*pendingReply // replies awaited, by request message id
	queue   []*Delivery              // received and not yet taken by Next
	arrived chan struct{}            // closed and replaced when queue grows
	cause   error                    // an error frame that ends the connection
	err     error                    // why the reader stopped; set before done closes
	done    chan struct{}            // closed when the reader stops

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
}

// DialEvents opens an event connection: it upgrades to
// {BaseURL}/v1/events/connect with the orbit.events.v1 sub-protocol and
// the token in the Authorization header, sends events.hello and waits for
// events.welcome. Cancelling ctx aborts the attempt; it does not affect the
// connection once DialEvents has returned.
//
// A refused upgrade is an *APIError with the HTTP Status (401, 403 for a
// credential without events:consume, 429 CAPACITY_EXCEEDED, …); a refused
// hello is an *APIError with Status 0, such as NOT_FOUND for a
// subscription the credential does not own. Other failures are network or
// protocol errors.
func DialEvents(ctx context.Context, cfg EventConnConfig) (*EventConn, error) {
	c, _, err := dialEvents(ctx, cfg)
	return c, err
}

// dialEvents is DialEvents that also returns the Retry-After of a refused
// upgrade.
func dialEvents(ctx context.Context, cfg EventConnConfig) (*EventConn, time.Duration, error) {
	base, err := checkServer(cfg.BaseURL, cfg.Token)
	if err != nil {
		return nil, 0, fmt.Errorf("orbit: DialEvents: %w", err)
	}
	switch {
	case cfg.SubscriptionID == "":
		return nil, 0, errors.New("orbit: DialEvents: SubscriptionID is empty")
	case cfg.Capacity < 0 || cfg.Capacity > MaxEventCapacity:
		return nil, 0, fmt.Errorf("orbit: DialEvents: Capacity must be 1 to %d", MaxEventCapacity)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultEventCapacity
	}
	hello, err := newFrame(frameEventsHello, "", eventsHelloBody{SubscriptionID: cfg.SubscriptionID, Capacity: cfg.Capacity})
	if err != nil {
		return nil, 0, fmt.Errorf("orbit events: %w", err)
	}
	ws, f, retry, err := handshake(ctx, handshakeParams{
		who: "orbit events", dialer: newDialer(cfg.Dialer, eventsProtocol),
		url: websocketURL(base, "/v1/events/connect"), header: upgradeHeader(cfg.Token), protocol: eventsProtocol,
		hello: hello, welcome: frameEventsWelcome, timeout: welcomeTimeout, trace: cfg.Trace,
	})
	if err != nil {
		return nil, retry, err
	}
	var w eventsWelcomeBody
	if err := json.Unmarshal(f.Body, &w); err != nil {
		closeNow(ws)
		return nil, 0, fmt.Errorf("orbit events: invalid welcome: %w", err)
	}
	if w.SessionID == "" || w.HeartbeatIntervalMS <= 0 || (f.SessionID != "" && f.SessionID != w.SessionID) {
		closeNow(ws)
		return nil, 0, errors.New("orbit events: welcome lacks a consistent session_id or heartbeat_interval_ms")
	}
	c := &EventConn{
		ws: ws, trace: cfg.Trace,
		welcome: Welcome{
			SessionID: w.SessionID, SubscriptionID: w.SubscriptionID, Capacity: w.Capacity,
			LeaseDuration:     time.Duration(w.LeaseDurationMS) * time.Millisecond,
			HeartbeatInterval: time.Duration(w.HeartbeatIntervalMS) * time.Millisecond,
			ServerTime:        w.ServerTime, Enabled: w.Enabled,
		},
		pending: make(map[string]*pendingReply),
		arrived: make(chan struct{}),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	go c.read()
	return c, 0, nil
}

// Welcome returns the server's welcome of this connection.
func (c *EventConn) Welcome() Welcome { return c.welcome }

// read runs in its own goroutine until the connection ends.
func (c *EventConn) read() {
	var err error
	for err == nil {
		var b []byte
		if b, err = readMessage(c.ws, c.trace); err == nil {
			err = c.handleMessage(b)
		}
	}
	_ = c.ws.Close()
	c.mu.Lock()
	switch {
	case c.cause != nil:
		err = c.cause
	case isClosed(c.closing):
		err = errEventConnClosed
	default:
		err = fmt.Errorf("orbit events: connection lost: %w", err)
	}
	c.err = err
	c.pending = nil
	close(c.arrived)
	close(c.done)
	c.mu.Unlock()
}

// handleMessage decodes one server message and routes it. It returns an
// error when the connection must end.
func (c *EventConn) handleMessage(b []byte) error {
	if d, f, ok := decodeEventsOnce(b, c.awaitsAck); ok {
		if d != nil {
			c.enqueue(d)
			return nil
		}
		return c.dispatch(f)
	}
	f, err := parseFrame(b)
	if err != nil {
		return err
	}
	return c.dispatch(f)
}

// awaitsAck reports whether the request with message id is an event.ack
// that waits for its answer.
func (c *EventConn) awaitsAck(id string) bool {
	c.mu.Lock()
	r := c.pending[id]
	c.mu.Unlock()
	return r != nil && r.typ == frameEventAck
}

// dispatch routes one server frame. It returns an error when the
// connection must end.
func (c *EventConn) dispatch(f frame) error {
	if f.ReplyTo != "" {
		c.mu.Lock()
		r := c.pending[f.ReplyTo]
		delete(c.pending, f.ReplyTo)
		if f.Type == frameTypeError && closesConnection(f.apiError().Code) && c.cause == nil {
			c.cause = f.apiError()
		}
		c.mu.Unlock()
		if r != nil {
			r.ch <- f // buffered: one reply per request
		}
		return nil // a late reply to a request that gave up is dropped
	}
	switch f.Type {
	case frameTypeError:
		// Sent by the server on its own (EVENT_HISTORY_EXPIRED,
		// UNAVAILABLE, UNAUTHENTICATED, …), just before it closes.
		e := f.apiError()
		c.mu.Lock()
		if c.cause == nil {
			c.cause = e
		}
		c.mu.Unlock()
		return e
	case frameEventDeliver:
		d, err := decodeDeliver(f.Body)
		if err != nil {
			return err
		}
		c.enqueue(d)
	}
	return nil // other frame types are for later protocol versions
}

// decodeDeliver decodes the body of an event.deliver.
func decodeDeliver(body json.RawMessage) (*Delivery, error) {
	var b deliverBody
	var ev ResultEvent
	err := json.Unmarshal(body, &b)
	if err == nil {
		err = json.Unmarshal(b.Event, &ev)
	}
	if err != nil {
		return nil, fmt.Errorf("orbit events: invalid %s: %w", frameEventDeliver, err)
	}
	return newDelivery(b, ev)
}

// newDelivery returns the delivery of a decoded event.deliver body whose
// event is ev.
func newDelivery(b deliverBody, ev ResultEvent) (*Delivery, error) {
	if b.Delivery.ID == "" || b.LeaseSecret == "" {
		return nil, fmt.Errorf("orbit events: %s lacks delivery.id or lease_secret", frameEventDeliver)
	}
	return &Delivery{EventDelivery: b.Delivery, Event: ev, EventJSON: b.Event,
		Proof: AckProof{DeliveryID: b.Delivery.ID, Epoch: b.Delivery.LeaseEpoch, LeaseSecret: b.LeaseSecret}, trace: b.Trace}, nil
}

// enqueue queues a delivery for Next.
func (c *EventConn) enqueue(d *Delivery) {
	c.mu.Lock()
	c.queue = append(c.queue, d)
	close(c.arrived)
	c.arrived = make(chan struct{})
	c.mu.Unlock()
}

// closesConnection reports whether the server closes the connection after
// answering a request with the error code.
func closesConnection(code string) bool {
	return code != CodeDeliveryLeaseLost && code != CodeInvalidArgument
}

// Next returns the next delivery, waiting for one until ctx is done.
// Deliveries received before the connection ended are still returned;
// after them Next returns why it ended: an *APIError for an error frame
// the server sent on its own (EVENT_HISTORY_EXPIRED, UNAVAILABLE,
// UNAUTHENTICATED, …) or for one that answered a request and closed the
// connection, an error wrapping net.ErrClosed after Close, and otherwise
// the network error.
func (c *EventConn) Next(ctx context.Context) (*Delivery, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			d := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return d, nil
		}
		arrived := c.arrived
		c.mu.Unlock()
		select {
		case <-c.done:
			c.mu.Lock()
			empty := len(c.queue) == 0
			c.mu.Unlock()
			if empty {
				return nil, c.err
			}
		case <-arrived:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Ack acknowledges a delivery with its proof (event.ack) and returns the
// server's answer. Call it only once the event is stored for good: an
// acknowledged delivery is never delivered again. The same proof may be
// sent again, on this or a later connection, when an answer was lost; the
// server then answers Deduplicated. A proof that a newer lease replaced,
// or a wrong one, is an *APIError with Code CodeDeliveryLeaseLost, and
// the connection stays open: the event will be delivered again with a new
// proof. If ctx ends first, Ack returns ctx.Err() and the acknowledgement
// may or may not have been recorded.
func (c *EventConn) Ack(ctx context.Context, proof AckProof) (*AckResult, error) {
	f, err := c.request(ctx, frameEventAck, proof)
	if err != nil {
		return nil, err
	}
	return decodeAck(f)
}

// Ping sends events.ping and returns the server's answer. The server also
// checks the credential and the subscription again: a revoked credential
// is an *APIError (UNAUTHENTICATED) and ends the connection. The
// connection sets no read deadline of its own, so a Ping whose ctx ends
// without an answer is the way to notice a connection that died silently;
// Close it then.
func (c *EventConn) Ping(ctx context.Context) (*PingResult, error) {
	f, err := c.request(ctx, frameEventsPing, struct{}{})
	if err != nil {
		return nil, err
	}
	var res PingResult
	if err := json.Unmarshal(f.Body, &res); err != nil {
		return nil, fmt.Errorf("orbit events: invalid ping answer: %w", err)
	}
	return &res, nil
}

// pendingReply is a request that was written and waits for its answer.
type pendingReply struct {
	c   *EventConn
	typ string
	id  string
	ch  chan frame
}

// send writes a request frame of type typ before deadline and returns the
// wait for its answer.
func (c *EventConn) send(typ string, body any, deadline time.Time) (*pendingReply, error) {
	f, err := newFrame(typ, c.welcome.SessionID, body)
	if err != nil {
		return nil, fmt.Errorf("orbit events: %w", err)
	}
	r := &pendingReply{c: c, typ: typ, id: f.MessageID, ch: make(chan frame, 1)}
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[r.id] = r
	c.mu.Unlock()
	if err := c.write(f, deadline); err != nil {
		r.forget()
		return nil, err
	}
	return r, nil
}

// forget stops waiting for the answer.
func (r *pendingReply) forget() {
	r.c.mu.Lock()
	delete(r.c.pending, r.id)
	r.c.mu.Unlock()
}

// wait returns the ack that answers the request. An error frame in reply
// is an *APIError; the end of the connection is its error.
func (r *pendingReply) wait(ctx context.Context) (frame, error) {
	var f frame
	select {
	case f = <-r.ch:
	case <-r.c.done:
		select {
		case f = <-r.ch:
		default:
			return frame{}, r.c.err
		}
	case <-ctx.Done():
		r.forget()
		return frame{}, ctx.Err()
	}
	switch f.Type {
	case frameAck:
		return f, nil
	case frameTypeError:
		return frame{}, f.apiError()
	}
	return frame{}, fmt.Errorf("orbit events: %s answered with %s", r.typ, f.Type)
}

// request sends one frame and waits for the ack that answers it.
func (c *EventConn) request(ctx context.Context, typ string, body any) (frame, error) {
	r, err := c.send(typ, body, writeDeadline(ctx))
	if err != nil {
		return frame{}, err
	}
	return r.wait(ctx)
}

// writeDeadline is writeTimeout from now, or ctx's deadline if earlier.
func writeDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(writeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// write sends f before deadline. A failed write ends the connection.
func (c *EventConn) write(f frame, deadline time.Time) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.done:
		return c.err
	default:
	}
	if err := writeFrameBy(c.ws, f, deadline, c.trace); err != nil {
		_ = c.ws.Close()
		if isClosed(c.closing) {
			return errEventConnClosed
		}
		return fmt.Errorf("orbit events: send %s: %w", f.Type, err)
	}
	return nil
}

// Done is closed when the connection has ended, after Close or a failure.
func (c *EventConn) Done() <-chan struct{} { return c.done }

// Close closes the connection with code 1000, waiting at most a second for
// the server to answer the close. Requests still waiting for a reply fail.
// Deliveries not acknowledged stay leased until their leases run out; their
// proofs remain valid on other connections. Close is idempotent and
// returns nil.
func (c *EventConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(closeWait))
		timer := time.NewTimer(closeWait)
		defer timer.Stop()
		select {
		case <-c.done:
		case <-timer.C:
			_ = c.ws.Close()
			<-c.done
		}
	})
	return nil
}

// abort ends the connection at once, without a close handshake, and waits
// for the reader: for a connection that is already broken.
func (c *EventConn) abort() {
	c.closeOnce.Do(func() { close(c.closing) })
	_ = c.ws.Close()
	<-c.done
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sessionFatal reports whether an error that ended an event connection,
// or answered one of its requests, means that reconnecting cannot help:
// an error frame with UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND or
// EVENT_HISTORY_EXPIRED.
func sessionFatal(err error) bool {
	var e *APIError
	if !errors.As(err, &e) || e.Status != 0 {
		return false
	}
	return isFatal(e.Code) || e.Code == CodeEventHistoryExpired
}
