package wstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// DefaultTimeout bounds every wait of a Client unless Options.Timeout says
// otherwise. It only turns a hang into a failure: a frame that is due
// arrives in milliseconds.
const DefaultTimeout = 10 * time.Second

// Options configure Dial.
type Options struct {
	// URL is the ws:// or wss:// URL of the entry.
	URL string
	// Subprotocol is offered on the upgrade; "" offers none.
	Subprotocol string
	// Token is sent as Authorization: Bearer <token>; "" sends no
	// Authorization header.
	Token string
	// Header holds more request headers, such as Origin.
	Header http.Header
	// OfferCompression offers permessage-deflate on the upgrade, to check
	// that the server does not negotiate it.
	OfferCompression bool
	// Validator checks every frame; nil checks none.
	Validator *Validator
	// Recorder receives every frame as well as the client's own record;
	// several clients may share one.
	Recorder *Recorder
	// Timeout bounds the waits of Next, Reply, NextType and ExpectClose;
	// zero means DefaultTimeout.
	Timeout time.Duration
}

func (o *Options) dialer() (*websocket.Dialer, http.Header) {
	d := &websocket.Dialer{HandshakeTimeout: DefaultTimeout, EnableCompression: o.OfferCompression}
	if o.Subprotocol != "" {
		d.Subprotocols = []string{o.Subprotocol}
	}
	h := http.Header{}
	for k, vs := range o.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if o.Token != "" {
		h.Set("Authorization", "Bearer "+o.Token)
	}
	return d, h
}

// Client is one raw WebSocket connection. Its reader goroutine queues
// every received frame, so that frames the server sends on its own (such
// as a lease assignment) wait in order while a test looks for a reply.
// Sending and the Next family are meant for one goroutine at a time; the
// Try… methods report instead of failing the test and may be used from
// other goroutines.
type Client struct {
	t       testing.TB
	ws      *websocket.Conn
	opts    Options
	timeout time.Duration
	own     Recorder

	// Response is the server's answer to the upgrade.
	Response *http.Response

	writeMu sync.Mutex

	mu       sync.Mutex
	session  string
	queue    []*Frame      // received and not yet taken
	arrived  chan struct{} // a frame was queued or the reader stopped
	done     chan struct{} // closed when the reader stops
	closeErr error         // why the reader stopped; set before done is closed
}

// Dial opens a connection and fails the test if the upgrade fails. The
// connection is closed when the test ends.
func Dial(t testing.TB, o Options) *Client {
	t.Helper()
	c, err := TryDial(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TryDial is Dial returning the error instead of failing the test.
func TryDial(t testing.TB, o Options) (*Client, error) {
	d, h := o.dialer()
	ws, resp, err := d.Dial(o.URL, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, fmt.Errorf("wstest: dial %s: %w (status %d)", o.URL, err, status)
	}
	c := &Client{
		t: t, ws: ws, opts: o, timeout: o.Timeout, Response: resp,
		arrived: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	go c.read()
	t.Cleanup(func() {
		_ = ws.Close()
		<-c.done
	})
	return c, nil
}

// Refusal is the HTTP answer to an upgrade that the server refused.
type Refusal struct {
	Status int
	Header http.Header
	// Body is the start of the reply body (the websocket package keeps
	// its first 1024 bytes).
	Body []byte
}

// Envelope decodes the error envelope of C-6 in r.Body.
func (r *Refusal) Envelope() (requestID, code, message string, err error) {
	var env struct {
		RequestID string      `json:"request_id"`
		Error     *FrameError `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		return "", "", "", fmt.Errorf("wstest: refusal body is not an envelope: %w: %s", err, r.Body)
	}
	if env.Error == nil {
		return env.RequestID, "", "", fmt.Errorf("wstest: refusal body has no error: %s", r.Body)
	}
	return env.RequestID, env.Error.Code, env.Error.Message, nil
}

// DialRefused tries to open a connection that the server must refuse and
// returns its HTTP answer. It fails the test if the upgrade succeeds.
func DialRefused(t testing.TB, o Options) *Refusal {
	t.Helper()
	d, h := o.dialer()
	ws, resp, err := d.Dial(o.URL, h)
	if err == nil {
		_ = ws.Close()
		t.Fatalf("wstest: dial %s: upgrade succeeded, want a refusal", o.URL)
	}
	if resp == nil {
		t.Fatalf("wstest: dial %s: %v, without an HTTP answer", o.URL, err)
	}
	defer resp.Body.Close()
	var body []byte
	buf := make([]byte, 1024)
	for {
		n, rerr := resp.Body.Read(buf)
		body = append(body, buf[:n]...)
		if rerr != nil {
			break
		}
	}
	return &Refusal{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// Subprotocol returns the sub-protocol the server selected.
func (c *Client) Subprotocol() string { return c.ws.Subprotocol() }

// Records returns every frame this client sent and received, in order.
func (c *Client) Records() []Record { return c.own.Records() }

// SetSession makes every frame built afterwards carry session_id id.
func (c *Client) SetSession(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session = id
}

// Session returns the id set with SetSession.
func (c *Client) Session() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// NewFrame returns a frame of type typ with a new random message id, the
// session id set with SetSession and body encoded as JSON (nil: no body).
func (c *Client) NewFrame(typ string, body any) *Frame {
	c.t.Helper()
	f, err := c.newFrame(typ, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *Client) newFrame(typ string, body any) (*Frame, error) {
	f := &Frame{ProtocolVersion: ProtocolVersion, Type: typ, MessageID: NewID(), SessionID: c.Session()}
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("wstest: encode %s body: %w", typ, err)
		}
		f.Body = raw
	}
	return f, nil
}

// Send sends a frame of type typ with body (see NewFrame), which must
// match the client definition of the schema, and returns its message id.
func (c *Client) Send(typ string, body any) string {
	c.t.Helper()
	return c.SendFrame(c.NewFrame(typ, body))
}

// SendFrame sends f, which must match the client definition of the schema,
// and returns its message id. It fails the test if the write fails.
func (c *Client) SendFrame(f *Frame) string {
	c.t.Helper()
	if err := c.send(f, Valid); err != nil {
		c.t.Fatal(err)
	}
	return f.MessageID
}

// TrySend is Send for other goroutines: it reports a failed write as an
// error instead of failing the test.
func (c *Client) TrySend(typ string, body any) (string, error) {
	f, err := c.newFrame(typ, body)
	if err != nil {
		return "", err
	}
	return f.MessageID, c.send(f, Valid)
}

// SendInvalid sends f, a frame outside the protocol's contract that a test
// sends to see the server refuse it. The schema must refuse it too; the
// test fails if the schema accepts it.
func (c *Client) SendInvalid(f *Frame) string {
	c.t.Helper()
	if err := c.send(f, Invalid); err != nil {
		c.t.Fatal(err)
	}
	return f.MessageID
}

// SendRaw sends data as a message of messageType (websocket.TextMessage
// or websocket.BinaryMessage) without any check.
func (c *Client) SendRaw(messageType int, data []byte) {
	c.t.Helper()
	c.check(Sent, "", data, Unchecked)
	if err := c.write(messageType, data); err != nil {
		c.t.Fatalf("wstest: send raw: %v", err)
	}
}

func (c *Client) send(f *Frame, expect Expectation) error {
	raw, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("wstest: encode %s frame: %w", f.Type, err)
	}
	f.Raw = raw
	c.check(Sent, f.Type, raw, expect)
	return c.write(websocket.TextMessage, raw)
}

func (c *Client) write(messageType int, data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.timeout))
	if err := c.ws.WriteMessage(messageType, data); err != nil {
		return fmt.Errorf("wstest: write: %w", err)
	}
	return nil
}

// check validates and records one frame. A violation is reported with
// Errorf, which is safe from the reader goroutine.
func (c *Client) check(dir Direction, typ string, raw []byte, expect Expectation) {
	rec := Record{Direction: dir, Type: typ, Raw: raw, Expect: expect}
	if v := c.opts.Validator; v != nil && expect != Unchecked {
		def := ClientFrame
		if dir == Received {
			def = ServerFrame
		}
		rec.Checked = true
		err := v.Validate(def, raw)
		switch expect {
		case Valid:
			rec.Err = err
			if err != nil {
				c.t.Errorf("wstest: %s frame breaks the schema (C-19): %v\nframe: %s", dir, err, raw)
			}
		case Invalid:
			if err == nil {
				rec.Err = fmt.Errorf("wstest: the schema accepts a frame sent as invalid: %s", raw)
				c.t.Errorf("%v", rec.Err)
			}
		}
	}
	c.own.add(rec)
	if c.opts.Recorder != nil {
		c.opts.Recorder.add(rec)
	}
}

// read is the reader goroutine.
func (c *Client) read() {
	defer close(c.done)
	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			c.mu.Lock()
			c.closeErr = err
			c.mu.Unlock()
			c.signal()
			return
		}
		if typ != websocket.TextMessage {
			c.check(Received, "", data, Unchecked)
			c.t.Errorf("wstest: received a binary message of %d bytes; every frame must be text (C-17)", len(data))
			continue
		}
		f := &Frame{}
		if err := json.Unmarshal(data, f); err != nil {
			c.check(Received, "", data, Valid)
			c.t.Errorf("wstest: received a frame that is not a JSON envelope: %v: %s", err, data)
			continue
		}
		f.Raw = data
		c.check(Received, f.Type, data, Valid)
		c.mu.Lock()
		c.queue = append(c.queue, f)
		c.mu.Unlock()
		c.signal()
	}
}

func (c *Client) signal() {
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

// ErrTimeout is returned by the Try… methods when nothing matching
// arrived in time.
var ErrTimeout = errors.New("wstest: timed out waiting for a frame")

// take removes and returns the first queued frame that match accepts.
func (c *Client) take(match func(*Frame) bool) (*Frame, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, f := range c.queue {
		if match(f) {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return f, true, nil
		}
	}
	select {
	case <-c.done:
		return nil, false, fmt.Errorf("wstest: connection closed: %w", c.closeErr)
	default:
	}
	return nil, false, nil
}

// TryWait returns the first received frame that match accepts, leaving
// other frames queued in order, or ErrTimeout after d, or an error once
// the connection has ended without such a frame.
func (c *Client) TryWait(d time.Duration, match func(*Frame) bool) (*Frame, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		f, ok, err := c.take(match)
		if ok {
			return f, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-c.arrived:
		case <-timer.C:
			return nil, ErrTimeout
		}
	}
}

// Wait is TryWait with the client's timeout that fails the test when no
// frame matches. what describes the frame for the failure message.
func (c *Client) Wait(what string, match func(*Frame) bool) *Frame {
	c.t.Helper()
	f, err := c.TryWait(c.timeout, match)
	if err != nil {
		c.t.Fatalf("wstest: waiting for %s: %v\nqueued: %s", what, err, c.queued())
	}
	return f
}

// Next returns the next received frame.
func (c *Client) Next() *Frame {
	c.t.Helper()
	return c.Wait("the next frame", func(*Frame) bool { return true })
}

// TryNext is Next for other goroutines, with its own bound d.
func (c *Client) TryNext(d time.Duration) (*Frame, error) {
	return c.TryWait(d, func(*Frame) bool { return true })
}

// NextType returns the next received frame of type typ; frames of other
// types stay queued.
func (c *Client) NextType(typ string) *Frame {
	c.t.Helper()
	return c.Wait("a "+typ+" frame", func(f *Frame) bool { return f.Type == typ })
}

// Reply returns the frame answering the message id; other frames stay
// queued.
func (c *Client) Reply(id string) *Frame {
	c.t.Helper()
	return c.Wait("the reply to "+id, func(f *Frame) bool { return f.ReplyTo == id })
}

// Request sends a frame of type typ with body and returns the frame that
// answers it.
func (c *Client) Request(typ string, body any) *Frame {
	c.t.Helper()
	return c.Reply(c.Send(typ, body))
}

// ExpectNone fails the test if a frame arrives within d. It is how a test
// shows that something does not happen; keep d short.
func (c *Client) ExpectNone(d time.Duration) {
	c.t.Helper()
	f, err := c.TryWait(d, func(*Frame) bool { return true })
	if err == nil {
		c.t.Fatalf("wstest: unexpected frame: %s", f)
	}
}

// ExpectClose waits for the server to close the connection and fails the
// test unless it closed it with code. It returns the frames that arrived
// before the close and were not taken yet.
func (c *Client) ExpectClose(code int) []*Frame {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(c.timeout):
		c.t.Fatalf("wstest: the server did not close the connection within %s; queued: %s", c.timeout, c.queued())
	}
	c.mu.Lock()
	rest := c.queue
	c.queue = nil
	err := c.closeErr
	c.mu.Unlock()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		c.t.Fatalf("wstest: connection ended with %v, want a close frame with code %d", err, code)
	}
	if ce.Code != code {
		c.t.Fatalf("wstest: close code %d (%q), want %d", ce.Code, ce.Text, code)
	}
	return rest
}

// Closed reports whether the connection has ended, and how.
func (c *Client) Closed() (bool, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return true, c.closeErr
	default:
		return false, nil
	}
}

// Close sends a normal close frame and waits, within the client's timeout,
// for the server to end the connection.
func (c *Client) Close() {
	c.writeMu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(c.timeout))
	c.writeMu.Unlock()
	select {
	case <-c.done:
	case <-time.After(c.timeout):
	}
	_ = c.ws.Close()
}

// queued describes the frames waiting, for failure messages.
func (c *Client) queued() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return "none"
	}
	parts := make([]string, len(c.queue))
	for i, f := range c.queue {
		parts[i] = string(f.Raw)
	}
	return strings.Join(parts, "\n")
}
