// Command events-protocol speaks the orbit.events.v1 protocol frame by
// frame, with gorilla/websocket and no SDK consumer, to show how an
// acknowledgement whose reply was lost is settled (seed 001 §6, E-10,
// E-19): it receives one delivery, sends event.ack, drops the connection
// without reading the reply, reconnects (a new session), sends the same
// proof again and gets deduplicated=true.
//
// It sets itself up with the Go SDK's management client: it creates a
// subscription, submits a task and cancels it, which produces the one
// result it then consumes. See README.md for how to run it against
// `make run`, every frame it sends and receives, and what it prints.
package main

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
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Exit codes.
const (
	exitOK = 0
	// exitFailed: a step failed (an API or protocol error, the network, or
	// nothing arrived in time).
	exitFailed = 1
	// exitConfig: the credentials could not be loaded or do not allow what
	// the example does.
	exitConfig = 2
)

const (
	// defaultCredentialsFile is where `make run` writes its dev
	// credentials, relative to the repository root.
	defaultCredentialsFile = ".local/dev.credentials.json"
	// subprotocol is the WebSocket sub-protocol of /v1/events/connect.
	subprotocol = "orbit.events.v1"
	// requestTimeout bounds each HTTP request.
	requestTimeout = 15 * time.Second
	// frameWait bounds the wait for a frame the server owes: the welcome,
	// the delivery (the server materialises a new result within about a
	// second) and the reply to an ACK.
	frameWait = 30 * time.Second
	// writeWait bounds writing one frame.
	writeWait = 5 * time.Second
	// recordWait bounds the wait for the server to record the first ACK.
	recordWait = 10 * time.Second
	// pollInterval is the pause between two looks at the delivery's state.
	pollInterval = 50 * time.Millisecond
)

// requiredPermissions are what the example uses: `orbit admin bootstrap`
// grants the tasks ones by default and the events ones with
// --event-access.
var requiredPermissions = []string{"events:manage", "events:read", "events:consume", "tasks:submit", "tasks:cancel"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mainCode(ctx, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// mainCode loads the credentials, runs the example with a new run ID and
// returns the exit code. Progress goes to stdout, a failure to stderr.
func mainCode(ctx context.Context, stdout, stderr io.Writer) int {
	creds, err := loadCredentials()
	if err != nil {
		printLine(stderr, "config", "error", err.Error())
		return exitConfig
	}
	if creds.QueueID == "" {
		printLine(stderr, "config", "error", `the credentials have no queue_id (set "queue_id" in the file or `+orbit.EnvQueueID+")")
		return exitConfig
	}
	err = run(ctx, stdout, creds, newRunID())
	if err == nil {
		return exitOK
	}
	var se *stepError
	if !errors.As(err, &se) {
		se = &stepError{step: "run", err: err}
	}
	se.print(stderr)
	if se.config {
		return exitConfig
	}
	return exitFailed
}

// loadCredentials reads the credentials as orbit.LoadCredentialsFromEnv
// does (ORBIT_CREDENTIALS_FILE, with ORBIT_URL overriding its url), or
// from defaultCredentialsFile when neither ORBIT_CREDENTIALS_FILE nor
// ORBIT_TOKEN is set.
func loadCredentials() (*orbit.Credentials, error) {
	if os.Getenv(orbit.EnvCredentialsFile) == "" && os.Getenv(orbit.EnvToken) == "" {
		return orbit.LoadCredentials(defaultCredentialsFile)
	}
	return orbit.LoadCredentialsFromEnv()
}

// newRunID returns 8 random hex characters that name this run's
// subscription and idempotency keys.
func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run performs every step with creds, printing one line per step to out.
// runID names the subscription and the idempotency keys. A failed step is
// returned as a *stepError.
func run(ctx context.Context, out io.Writer, creds *orbit.Credentials, runID string) error {
	client, err := creds.NewClient(orbit.WithHTTPClient(&http.Client{Timeout: requestTimeout}),
		orbit.WithUserAgent("orbit-events-protocol"))
	if err != nil {
		return &stepError{step: "config", config: true, err: err}
	}
	key := func(op string) string { return "events-protocol:" + runID + ":" + op }

	info, err := client.Credential(ctx)
	if err != nil {
		return fail("credential", err)
	}
	var missing []string
	for _, p := range requiredPermissions {
		if !slices.Contains(info.Permissions, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return &stepError{step: "credential", config: true, err: fmt.Errorf(
			"the credential lacks %s; bootstrap one with --event-access", strings.Join(missing, ","))}
	}
	printLine(out, "credential", "credential_id", info.ID, "queue_id", creds.QueueID)

	// A subscription of its own, for task.cancelled results from now on.
	created, err := client.CreateSubscription(ctx, key("create"), orbit.CreateSubscriptionRequest{
		Name: "events-protocol-" + runID, QueueID: creds.QueueID, Types: []string{orbit.EventTypeTaskCancelled},
	})
	if err != nil {
		return fail("create", err)
	}
	sub := created.Subscription
	printLine(out, "create", "subscription_id", sub.ID, "name", sub.Name, "cursor_sequence", sub.CursorSequence)

	// One result: a task submitted and cancelled while PENDING.
	submitted, err := client.SubmitTask(ctx, key("submit"), orbit.SubmitTaskRequest{
		QueueID: creds.QueueID, Input: json.RawMessage(`{"example":"events-protocol","run":"` + runID + `"}`),
	})
	if err != nil {
		return fail("submit", err)
	}
	printLine(out, "submit", "task_id", submitted.Task.ID, "state", submitted.Task.State)
	cancelled, err := client.CancelTask(ctx, submitted.Task.ID, key("cancel"), orbit.CancelTaskRequest{Reason: "example: produce one result"})
	if err != nil {
		return fail("cancel", err)
	}
	printLine(out, "cancel", "task_id", cancelled.Task.ID, "state", cancelled.Task.State)

	wsURL, err := eventsURL(creds.URL)
	if err != nil {
		return &stepError{step: "config", config: true, err: err}
	}

	// First connection: hello, welcome, one delivery, event.ack, and the
	// connection dropped before the reply is read.
	first, err := connect(ctx, wsURL, creds.Token, sub.ID)
	if err != nil {
		return fail("connect", err)
	}
	defer first.ws.Close()
	w := first.welcome
	printLine(out, "connect", "session_id", w.SessionID, "capacity", w.Capacity, "lease_duration_ms", w.LeaseDurationMS,
		"heartbeat_interval_ms", w.HeartbeatIntervalMS, "enabled", w.Enabled)

	d, err := first.nextDelivery(ctx)
	if err != nil {
		return fail("deliver", err)
	}
	if d.Event.AggregateID != cancelled.Task.ID {
		return fail("deliver", fmt.Errorf("delivery %s carries task %s, want %s", d.Delivery.ID, d.Event.AggregateID, cancelled.Task.ID))
	}
	printLine(out, "deliver", "delivery_id", d.Delivery.ID, "event_id", d.Event.ID, "event_type", d.Event.Type,
		"task_id", d.Event.AggregateID, "epoch", d.Delivery.LeaseEpoch, "attempts", d.Delivery.Attempts)
	// The proof: delivery ID, lease epoch and lease secret. A real
	// receiver stores the event in its Inbox (keyed by event.id) and keeps
	// the proof until the server has answered the ACK.
	proof := ackBody{DeliveryID: d.Delivery.ID, Epoch: d.Delivery.LeaseEpoch, LeaseSecret: d.LeaseSecret}

	ackID, err := first.send("event.ack", proof)
	if err != nil {
		return fail("ack", err)
	}
	printLine(out, "ack", "session_id", w.SessionID, "message_id", ackID, "delivery_id", proof.DeliveryID, "epoch", proof.Epoch)

	// Wait until the server has recorded the ACK, looking over HTTP rather
	// than at the WebSocket: the reply is to be lost. (Dropping the
	// connection at once may lose the ACK itself, since the server drops
	// the frames of a connection that ended; the repeat below would then
	// be the first ACK, answered with deduplicated=false.)
	recorded, err := waitAcked(ctx, client, sub.ID, proof.DeliveryID)
	if err != nil {
		return fail("recorded", err)
	}
	printLine(out, "recorded", "delivery_id", recorded.ID, "state", recorded.State,
		"acknowledged_at", recorded.AcknowledgedAt.UTC().Format(time.RFC3339Nano))
	_ = first.ws.Close() // no close frame, and the reply stays unread
	printLine(out, "drop", "session_id", w.SessionID, "reply", "unread")

	// Second connection: a new session, the same proof again.
	second, err := connect(ctx, wsURL, creds.Token, sub.ID)
	if err != nil {
		return fail("reconnect", err)
	}
	defer second.ws.Close()
	printLine(out, "reconnect", "session_id", second.welcome.SessionID, "previous_session_id", w.SessionID)
	againID, err := second.send("event.ack", proof)
	if err != nil {
		return fail("ack-again", err)
	}
	printLine(out, "ack-again", "session_id", second.welcome.SessionID, "message_id", againID,
		"delivery_id", proof.DeliveryID, "epoch", proof.Epoch)
	reply, err := second.reply(ctx, againID)
	if err != nil {
		return fail("ack-reply", err)
	}
	var res ackReply
	if err := json.Unmarshal(reply.Body, &res); err != nil {
		return fail("ack-reply", fmt.Errorf("invalid ack body: %w", err))
	}
	printLine(out, "ack-reply", "reply_to", reply.ReplyTo, "delivery_id", res.DeliveryID, "event_id", res.EventID,
		"epoch", res.Epoch, "acknowledged_at", res.AcknowledgedAt, "deduplicated", res.Deduplicated)
	second.close()

	// Leave the subscription paused, so that it collects no backlog.
	current, err := client.GetSubscription(ctx, sub.ID)
	if err != nil {
		return fail("leave-paused", err)
	}
	paused, err := client.ConfigureSubscription(ctx, sub.ID, key("leave-paused"), orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: current.Revision, Enabled: false, Reason: "example: finished",
	})
	if err != nil {
		return fail("leave-paused", err)
	}
	printLine(out, "leave-paused", "subscription_id", sub.ID, "revision", paused.Subscription.Revision,
		"enabled", paused.Subscription.Enabled)
	printLine(out, "done", "subscription_id", sub.ID, "delivery_id", res.DeliveryID, "deduplicated", res.Deduplicated)
	return nil
}

// eventsURL returns the ws:// or wss:// URL of the event entry of the
// server at base.
func eventsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("the server URL must be http:// or https:// with a host")
	}
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/events/connect"
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// waitAcked polls the delivery until the server reports it ACKED.
func waitAcked(ctx context.Context, client *orbit.Client, subscriptionID, deliveryID string) (*orbit.EventDelivery, error) {
	ctx, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	for {
		d, err := client.GetEventDelivery(ctx, subscriptionID, deliveryID)
		if err != nil {
			return nil, err
		}
		if d.Delivery.State == orbit.DeliveryStateAcked {
			return &d.Delivery, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the delivery is still %s after %s", d.Delivery.State, recordWait)
		case <-time.After(pollInterval):
		}
	}
}

// frame is the envelope of every orbit.events.v1 message.
type frame struct {
	ProtocolVersion string          `json:"protocol_version"`
	Type            string          `json:"type"`
	MessageID       string          `json:"message_id"`
	SessionID       string          `json:"session_id,omitempty"`
	ReplyTo         string          `json:"reply_to,omitempty"`
	Body            json.RawMessage `json:"body,omitempty"`
	Error           *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type helloBody struct {
	SubscriptionID string `json:"subscription_id"`
	Capacity       int    `json:"capacity"`
}

type welcomeBody struct {
	SessionID           string `json:"session_id"`
	SubscriptionID      string `json:"subscription_id"`
	Capacity            int    `json:"capacity"`
	LeaseDurationMS     int64  `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	ServerTime          string `json:"server_time"`
	Enabled             bool   `json:"enabled"`
}

// deliverBody is the part of event.deliver the example uses.
type deliverBody struct {
	Delivery struct {
		ID         string `json:"id"`
		LeaseEpoch string `json:"lease_epoch"`
		Attempts   int    `json:"attempts"`
	} `json:"delivery"`
	Event struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		AggregateID string `json:"aggregate_id"`
	} `json:"event"`
	LeaseSecret string `json:"lease_secret"`
}

// ackBody is the body of event.ack: the delivery's proof. The epoch is a
// decimal string, as every uint64 of the protocol.
type ackBody struct {
	DeliveryID  string `json:"delivery_id"`
	Epoch       string `json:"epoch"`
	LeaseSecret string `json:"lease_secret"`
}

// ackReply is the body of the ack that answers event.ack.
type ackReply struct {
	DeliveryID     string `json:"delivery_id"`
	EventID        string `json:"event_id"`
	Epoch          string `json:"epoch"`
	AcknowledgedAt string `json:"acknowledged_at"`
	Deduplicated   bool   `json:"deduplicated"`
}

// conn is one event connection after its welcome.
type conn struct {
	ws      *websocket.Conn
	welcome welcomeBody
}

// connect opens an event connection to subscriptionID: the upgrade with
// the token in the Authorization header and the sub-protocol, then
// events.hello with capacity 1 and the events.welcome that answers it.
func connect(ctx context.Context, wsURL, token, subscriptionID string) (*conn, error) {
	d := websocket.Dialer{Subprotocols: []string{subprotocol}, HandshakeTimeout: frameWait}
	ws, resp, err := d.DialContext(ctx, wsURL, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp != nil {
			return nil, refusal(resp)
		}
		return nil, err
	}
	if ws.Subprotocol() != subprotocol {
		ws.Close()
		return nil, fmt.Errorf("the server chose sub-protocol %q", ws.Subprotocol())
	}
	c := &conn{ws: ws}
	helloID, err := c.send("events.hello", helloBody{SubscriptionID: subscriptionID, Capacity: 1})
	if err != nil {
		ws.Close()
		return nil, err
	}
	f, err := c.reply(ctx, helloID)
	if err == nil && f.Type != "events.welcome" {
		err = fmt.Errorf("the hello was answered with %s", f.Type)
	}
	if err == nil {
		err = json.Unmarshal(f.Body, &c.welcome)
	}
	if err != nil {
		ws.Close()
		return nil, err
	}
	return c, nil
}

// send writes one frame of type typ with body and a new message id, which
// it returns. Every frame after the welcome carries the session id.
func (c *conn) send(typ string, body any) (string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	f := frame{ProtocolVersion: "1", Type: typ, MessageID: newMessageID(), SessionID: c.welcome.SessionID, Body: raw}
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	if err := c.ws.WriteJSON(f); err != nil {
		return "", fmt.Errorf("send %s: %w", typ, err)
	}
	return f.MessageID, nil
}

// read returns the next frame, waiting at most frameWait or until ctx
// ends.
func (c *conn) read(ctx context.Context) (*frame, error) {
	deadline := time.Now().Add(frameWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.ws.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.ws.SetReadDeadline(time.Now()) })
	defer stop()
	var f frame
	if err := c.ws.ReadJSON(&f); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if f.Type == "error" && f.ReplyTo == "" && f.Error != nil {
		return nil, fmt.Errorf("the server reported %s: %s", f.Error.Code, f.Error.Message)
	}
	return &f, nil
}

// reply returns the frame that answers the request with message id id;
// frames in between (such as deliveries) are skipped. An error frame in
// reply is an error.
func (c *conn) reply(ctx context.Context, id string) (*frame, error) {
	for {
		f, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		if f.ReplyTo != id {
			continue
		}
		if f.Type == "error" && f.Error != nil {
			return nil, fmt.Errorf("%s: %s", f.Error.Code, f.Error.Message)
		}
		return f, nil
	}
}

// nextDelivery returns the next event.deliver.
func (c *conn) nextDelivery(ctx context.Context) (*deliverBody, error) {
	for {
		f, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		if f.Type != "event.deliver" {
			continue
		}
		var d deliverBody
		if err := json.Unmarshal(f.Body, &d); err != nil {
			return nil, fmt.Errorf("invalid event.deliver: %w", err)
		}
		return &d, nil
	}
}

// close closes the connection normally: a close frame with 1000, then the
// server's close frame, for at most a second.
func (c *conn) close() {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	_ = c.ws.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			break
		}
	}
	_ = c.ws.Close()
}

// refusal describes an upgrade the server refused, with the error code of
// its envelope when there is one.
func refusal(resp *http.Response) error {
	var env struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &env) == nil && env.Error != nil {
		return fmt.Errorf("upgrade refused with %s: %s: %s", resp.Status, env.Error.Code, env.Error.Message)
	}
	return fmt.Errorf("upgrade refused with %s", resp.Status)
}

// newMessageID returns 32 random lowercase hexadecimal characters.
func newMessageID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stepError is a failed step.
type stepError struct {
	step string
	// config marks a problem of the credentials rather than of the step.
	config bool
	err    error
}

func fail(step string, err error) error { return &stepError{step: step, err: err} }

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }

func (e *stepError) Unwrap() error { return e.err }

// print writes the failure as one line: the API's status, code and request
// id when the server answered over HTTP, the message in any case.
func (e *stepError) print(w io.Writer) {
	var apiErr *orbit.APIError
	if errors.As(e.err, &apiErr) {
		printLine(w, e.step, "error", apiErr.Code, "status", apiErr.Status, "request_id", apiErr.RequestID, "message", apiErr.Message)
		return
	}
	printLine(w, e.step, "error", e.err.Error())
}

// printLine writes "step=<step>" and the key=value pairs kv as one line.
// Values with spaces, quotes or '=' are quoted; empty values print as "".
func printLine(w io.Writer, step string, kv ...any) {
	var b strings.Builder
	b.WriteString("step=" + step)
	for i := 0; i+1 < len(kv); i += 2 {
		v := fmt.Sprint(kv[i+1])
		if v == "" || strings.ContainsAny(v, " \t\n\"=\\") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", kv[i], v)
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}
