package events_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

const (
	// docPath is the API document whose examples these tests produce.
	docPath = "../../docs/api/events.md"
	// schemaPath is the protocol's JSON Schema (C-19, E-18).
	schemaPath = "../../docs/api/events.schema.json"
	// connectPath is the event entry.
	connectPath = "/v1/events/connect"
	// bound limits every wait for something that is due; it only turns a
	// hang into a failure.
	bound = 10 * time.Second
	// quiet is how long a test listens to show that a frame does not
	// come. The dispatchers of these servers poll every pollInterval, so
	// it covers several of their rounds.
	quiet = 300 * time.Millisecond
	// pollInterval is the events.poll_interval of every test server.
	pollInterval = 50 * time.Millisecond
	// shortLease is the events.lease_duration of tests that wait for a
	// lease to run out.
	shortLease = time.Second
)

// eventPermissions lets a credential manage, read and consume
// subscriptions and produce results through the tasks API.
var eventPermissions = []string{
	auth.PermEventsManage, auth.PermEventsRead, auth.PermEventsConsume,
	auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel,
}

// Frame types of orbit.events.v1.
const (
	typeHello   = "events.hello"
	typeWelcome = "events.welcome"
	typeDeliver = "event.deliver"
	typeAck     = "event.ack"
	typePing    = "events.ping"
	typeReply   = "ack"
	typeError   = "error"
)

// Close codes.
const (
	closeGoingAway       = 1001
	closePolicyViolation = 1008
	closeTooBig          = 1009
)

// recorder receives every frame of every test in the package.
var recorder = &wstest.Recorder{}

// schema returns the protocol's schema, compiled once per test binary.
var schema = wstest.LoadOnce(schemaPath)

// env is a real server on a fresh database and a credential of namespace
// "ns" that may use subscriptions on the queue "q".
type env struct {
	srv  *servertest.Server
	cred servertest.Credential
	url  string // ws://…/v1/events/connect
}

// eventsConfig changes the events section of a test server.
func eventsConfig(change func(*events.Config)) servertest.Option {
	return servertest.ModuleConfig("events", change)
}

// subscriptionsConfig changes the subscriptions section of a test server.
func subscriptionsConfig(change func(*subscriptions.Config)) servertest.Option {
	return servertest.ModuleConfig("subscriptions", change)
}

// shortLeases makes leases last shortLease and the sweeper recover them
// every 100 ms, for tests that wait for a lease to run out (E-8).
func shortLeases() servertest.Option {
	return func(cfg *config.Config, in modules.Instances) {
		eventsConfig(func(c *events.Config) { c.LeaseDuration = shortLease })(cfg, in)
		subscriptionsConfig(func(c *subscriptions.Config) { c.RecoverInterval = 100 * time.Millisecond })(cfg, in)
	}
}

// setup starts a server whose event connections poll every pollInterval,
// with the changes of opts.
func setup(t *testing.T, opts ...servertest.Option) *env {
	t.Helper()
	opts = append([]servertest.Option{eventsConfig(func(c *events.Config) { c.PollInterval = pollInterval })}, opts...)
	srv := servertest.Start(t, opts...)
	e := &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	e.cred = e.credential(t, servertest.CredentialParams{})
	return e
}

// credential returns a new credential with p; empty permissions get
// eventPermissions.
func (e *env) credential(t *testing.T, p servertest.CredentialParams) servertest.Credential {
	t.Helper()
	if p.Permissions == nil {
		p.Permissions = eventPermissions
	}
	return e.srv.Credential(t, p)
}

// ownQueue returns a new credential like e.cred on a queue of its own, so
// that parallel subtests sharing a server do not see each other's results.
func (e *env) ownQueue(t *testing.T) servertest.Credential {
	t.Helper()
	return e.credential(t, servertest.CredentialParams{Queue: "q-" + strings.ToLower(rand.Text())[:12]})
}

// options returns the dial options of cred with the schema and the package
// recorder.
func (e *env) options(t testing.TB, cred servertest.Credential) wstest.Options {
	return wstest.Options{
		URL: e.url, Subprotocol: events.Subprotocol, Token: cred.Token,
		Validator: schema(t), Recorder: recorder, Timeout: bound,
	}
}

// dial opens a connection with cred and sends nothing.
func (e *env) dial(t testing.TB, cred servertest.Credential) *wstest.Client {
	t.Helper()
	return wstest.Dial(t, e.options(t, cred))
}

// helloBody is the body of events.hello.
type helloBody struct {
	SubscriptionID string `json:"subscription_id"`
	Capacity       int    `json:"capacity"`
}

// welcomeBody is the body of events.welcome.
type welcomeBody struct {
	SessionID           string `json:"session_id"`
	SubscriptionID      string `json:"subscription_id"`
	Capacity            int    `json:"capacity"`
	LeaseDurationMS     int64  `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	ServerTime          string `json:"server_time"`
	Enabled             bool   `json:"enabled"`
}

// consumer is a raw event connection after its welcome.
type consumer struct {
	*wstest.Client
	session string
	hello   *wstest.Frame
	welcome *wstest.Frame
	body    welcomeBody
}

// connect opens an event connection of cred on the subscription with
// capacity and checks that it is welcomed.
func (e *env) connect(t testing.TB, cred servertest.Credential, subscriptionID string, capacity int) *consumer {
	t.Helper()
	c := e.dial(t, cred)
	hello := c.NewFrame(typeHello, helloBody{SubscriptionID: subscriptionID, Capacity: capacity})
	c.SendFrame(hello)
	welcome := c.Reply(hello.MessageID)
	if welcome.Type != typeWelcome {
		t.Fatalf("answer to hello: %s, want events.welcome", welcome)
	}
	w := &consumer{Client: c, hello: hello, welcome: welcome}
	decode(t, welcome, &w.body)
	w.session = w.body.SessionID
	c.SetSession(w.session)
	return w
}

// decode decodes the body of f into dst.
func decode(t testing.TB, f *wstest.Frame, dst any) {
	t.Helper()
	if err := f.DecodeBody(dst); err != nil {
		t.Fatalf("decode %s body: %v: %s", f.Type, err, f)
	}
}

// deliveryView is an EventDelivery as the protocol sends it.
type deliveryView struct {
	CreatedAt      string `json:"created_at"`
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	EventID        string `json:"event_id"`
	Sequence       string `json:"sequence"`
	Revision       string `json:"revision"`
	State          string `json:"state"`
	AvailableAt    string `json:"available_at"`
	LeaseEpoch     string `json:"lease_epoch"`
	LeaseUntil     string `json:"lease_until"`
	Attempts       int    `json:"attempts"`
	AttemptBudget  int    `json:"attempt_budget"`
	AcknowledgedAt string `json:"acknowledged_at"`
}

// eventView is a result event as the protocol sends it.
type eventView struct {
	ID                string          `json:"id"`
	Sequence          string          `json:"sequence"`
	Type              string          `json:"type"`
	AggregateKind     string          `json:"aggregate_kind"`
	AggregateID       string          `json:"aggregate_id"`
	AggregateRevision string          `json:"aggregate_revision"`
	OccurredAt        string          `json:"occurred_at"`
	Details           json.RawMessage `json:"details"`
	Snapshot          json.RawMessage `json:"snapshot"`
}

// delivered is the body of event.deliver.
type delivered struct {
	Delivery    deliveryView `json:"delivery"`
	Event       eventView    `json:"event"`
	LeaseSecret string       `json:"lease_secret"`

	frame *wstest.Frame
}

// proof is the body of event.ack.
type proof struct {
	DeliveryID  string `json:"delivery_id"`
	Epoch       string `json:"epoch"`
	LeaseSecret string `json:"lease_secret"`
}

func (d *delivered) proof() proof {
	return proof{DeliveryID: d.Delivery.ID, Epoch: d.Delivery.LeaseEpoch, LeaseSecret: d.LeaseSecret}
}

// ackReply is the body of the ack of event.ack.
type ackReply struct {
	DeliveryID     string `json:"delivery_id"`
	EventID        string `json:"event_id"`
	Epoch          string `json:"epoch"`
	AcknowledgedAt string `json:"acknowledged_at"`
	Deduplicated   bool   `json:"deduplicated"`
}

// pingReply is the body of the ack of events.ping.
type pingReply struct {
	ServerTime string `json:"server_time"`
	Enabled    bool   `json:"enabled"`
}

// settle waits until the connection's dispatcher has finished the claim it
// makes right after the welcome or after sending deliveries, for tests
// whose next step must be found by a ping or an ACK rather than by that
// claim (claims check the credential too).
func (c *consumer) settle() { time.Sleep(quiet) }

// deliver returns the next event.deliver; other frames stay queued.
func (c *consumer) deliver(t testing.TB) *delivered {
	t.Helper()
	f := c.NextType(typeDeliver)
	d := &delivered{frame: f}
	decode(t, f, d)
	return d
}

// ack sends event.ack with p and returns the answer.
func (c *consumer) ack(t testing.TB, p proof) *wstest.Frame {
	t.Helper()
	return c.Request(typeAck, p)
}

// acked sends event.ack with p and returns the body of its ack.
func (c *consumer) acked(t testing.TB, p proof) ackReply {
	t.Helper()
	return wantAckReply(t, c.ack(t, p))
}

// ping sends events.ping and returns the answer.
func (c *consumer) ping(t testing.TB) *wstest.Frame {
	t.Helper()
	return c.Request(typePing, struct{}{})
}

// wantAckReply checks that f is the ack of an event.ack and returns its
// body.
func wantAckReply(t testing.TB, f *wstest.Frame) ackReply {
	t.Helper()
	if f.Type != typeReply {
		t.Fatalf("answer to event.ack %s, want ack", f)
	}
	var r ackReply
	decode(t, f, &r)
	return r
}

// wantPingReply checks that f is the ack of a ping and returns its body.
func wantPingReply(t testing.TB, f *wstest.Frame) pingReply {
	t.Helper()
	if f.Type != typeReply {
		t.Fatalf("answer to ping %s, want ack", f)
	}
	var r pingReply
	decode(t, f, &r)
	if _, err := time.Parse(time.RFC3339Nano, r.ServerTime); err != nil {
		t.Fatalf("ping ack server_time: %v", err)
	}
	return r
}

// wantError checks that f is an error frame with code and without a body.
func wantError(t testing.TB, f *wstest.Frame, code string) {
	t.Helper()
	if f.Type != typeError || f.Error == nil || f.Error.Code != code {
		t.Fatalf("answer %s, want an error %s", f, code)
	}
	if f.Body != nil {
		t.Fatalf("error frame with a body: %s", f)
	}
}

// newKey returns a fresh Idempotency-Key.
func newKey() string { return "key-" + rand.Text() }

// subscriptionParams describe a subscription to create.
type subscriptionParams struct {
	Types       []string // default: every result type
	MaxPending  int      // 0: the server's default
	MaxAttempts int      // 0: the server's default
}

// subscribe creates a subscription of cred on its queue and returns its id.
func (e *env) subscribe(t testing.TB, cred servertest.Credential, p subscriptionParams) string {
	t.Helper()
	req := map[string]any{"name": "s-" + strings.ToLower(rand.Text())[:12], "queue_id": cred.QueueID}
	if p.Types != nil {
		req["types"] = p.Types
	}
	if p.MaxPending != 0 {
		req["max_pending"] = p.MaxPending
	}
	if p.MaxAttempts != 0 {
		req["max_attempts"] = p.MaxAttempts
	}
	body, _ := json.Marshal(req)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions", Token: cred.Token, IdempotencyKey: newKey(), Body: string(body)})
	if r.Status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Subscription struct {
			ID string `json:"id"`
		} `json:"subscription"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Subscription.ID
}

// subscriptionView is the part of a subscription the tests look at.
type subscriptionView struct {
	Revision       string `json:"revision"`
	Enabled        bool   `json:"enabled"`
	CursorSequence string `json:"cursor_sequence"`
	PendingCount   int    `json:"pending_count"`
}

// subscription reads a subscription through GET /v1/subscriptions/{id}.
func (e *env) subscription(t testing.TB, cred servertest.Credential, id string) subscriptionView {
	t.Helper()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/subscriptions/" + id, Token: cred.Token})
	if r.Status != http.StatusOK {
		t.Fatalf("get subscription: %d %s", r.Status, r.Body)
	}
	var v subscriptionView
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// configure pauses (enabled false) or resumes a subscription over HTTP.
func (e *env) configure(t testing.TB, cred servertest.Credential, id string, enabled bool) {
	t.Helper()
	current := e.subscription(t, cred, id)
	body := fmt.Sprintf(`{"expected_revision":%q,"enabled":%v,"reason":"receiver maintenance"}`, current.Revision, enabled)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions/" + id + ":configure", Token: cred.Token, IdempotencyKey: newKey(), Body: body})
	if r.Status != http.StatusOK {
		t.Fatalf("configure subscription: %d %s", r.Status, r.Body)
	}
}

// deliveryDetail reads a delivery and its event through
// GET /v1/subscriptions/{id}/deliveries/{delivery_id}.
func (e *env) deliveryDetail(t testing.TB, cred servertest.Credential, subscriptionID, id string) (deliveryView, json.RawMessage) {
	t.Helper()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/subscriptions/" + subscriptionID + "/deliveries/" + id, Token: cred.Token})
	if r.Status != http.StatusOK {
		t.Fatalf("get delivery: %d %s", r.Status, r.Body)
	}
	var detail struct {
		Delivery deliveryView    `json:"delivery"`
		Event    json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(r.Data, &detail); err != nil {
		t.Fatal(err)
	}
	return detail.Delivery, detail.Event
}

// retry retries an EXPIRED delivery over HTTP with one more attempt.
func (e *env) retry(t testing.TB, cred servertest.Credential, subscriptionID, id string) deliveryView {
	t.Helper()
	current, _ := e.deliveryDetail(t, cred, subscriptionID, id)
	body := fmt.Sprintf(`{"expected_revision":%q,"reason":"receiver persistence failure repaired","additional_attempts":1}`, current.Revision)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions/" + subscriptionID + "/deliveries/" + id + ":retry", Token: cred.Token, IdempotencyKey: newKey(), Body: body})
	if r.Status != http.StatusOK {
		t.Fatalf("retry delivery: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Delivery deliveryView `json:"delivery"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Delivery
}

// result produces one task.cancelled on cred's queue over HTTP (submit,
// then cancel) and returns the task id.
func (e *env) result(t testing.TB, cred servertest.Credential) string {
	t.Helper()
	return e.resultWith(t, cred, nil)
}

// resultWith is result with the submit's extra request headers, such as
// traceparent.
func (e *env) resultWith(t testing.TB, cred servertest.Credential, header http.Header) string {
	t.Helper()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: newKey(),
		Body: fmt.Sprintf(`{"queue_id":%q,"input":{}}`, cred.QueueID), Header: header})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	r = e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks/" + receipt.Task.ID + ":cancel", Token: cred.Token, IdempotencyKey: newKey(), Body: `{}`})
	if r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	return receipt.Task.ID
}

// results produces n task.cancelled on cred's queue through the tasks
// store, in transactions of up to 200 tasks; the store wakes the
// materialiser after each commit.
func (e *env) results(t testing.TB, cred servertest.Credential, n int) {
	t.Helper()
	ctx := context.Background()
	store := e.srv.Instances["tasks"].(*tasks.Module).Store()
	for done := 0; done < n; {
		batch := min(200, n-done)
		err := store.Tx(ctx, func(tx *sql.Tx) error {
			for range batch {
				task, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: cred.NamespaceID, QueueID: cred.QueueID, CredentialID: cred.CredentialID,
					Input: []byte(`{}`), MaxAttempts: 1,
				})
				if err != nil {
					return err
				}
				if _, _, err := tasks.TaskCancel(ctx, tx, task.ID, ""); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		done += batch
	}
}

// deliveryRow is a row of event_deliveries.
type deliveryRow struct {
	State      string
	Revision   uint64
	Epoch      uint64
	LeaseUntil sql.NullTime
	Digest     []byte
	Session    sql.NullString
	Attempts   int
	Budget     int
	AckedAt    sql.NullTime
}

// deliveryRow reads the delivery id from the database.
func (e *env) deliveryRow(t testing.TB, id string) deliveryRow {
	t.Helper()
	var d deliveryRow
	err := e.srv.DB.QueryRowContext(context.Background(), `SELECT state, revision, lease_epoch, lease_until,
		lease_secret_digest, lease_session_id, attempts, attempt_budget, acknowledged_at FROM event_deliveries WHERE id = ?`, id).
		Scan(&d.State, &d.Revision, &d.Epoch, &d.LeaseUntil, &d.Digest, &d.Session, &d.Attempts, &d.Budget, &d.AckedAt)
	if err != nil {
		t.Fatalf("delivery %s: %v", id, err)
	}
	return d
}

// waitDeliveryState polls the delivery until it is in state, within bound.
func (e *env) waitDeliveryState(t testing.TB, id, state string) deliveryRow {
	t.Helper()
	var d deliveryRow
	eventually(t, "delivery "+id+" in state "+state, func() bool {
		d = e.deliveryRow(t, id)
		return d.State == state
	})
	return d
}

// count runs a COUNT(*) query.
func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.srv.DB.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond every 20 ms until it holds, and fails the test if
// it does not within bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// otherSecret returns a canonical lease secret that is not s.
func otherSecret(s string) string {
	for {
		var b [32]byte
		_, _ = rand.Read(b[:])
		if o := base64.RawURLEncoding.EncodeToString(b[:]); o != s {
			return o
		}
	}
}

// secretDigest returns the digest stored for a lease secret.
func secretDigest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// parseTime parses a time of the protocol.
func parseTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return v
}

// members returns the sorted member names of the JSON object raw.
func members(t testing.TB, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not an object: %v: %s", err, raw)
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wantMembers checks that the JSON object raw has exactly the members
// want.
func wantMembers(t testing.TB, what string, raw []byte, want ...string) {
	t.Helper()
	want = slices.Clone(want)
	sort.Strings(want)
	if got := members(t, raw); !slices.Equal(got, want) {
		t.Errorf("%s members %v, want %v", what, got, want)
	}
}

// isClosed reports whether err says the connection has ended.
func isClosed(err error) bool {
	return err != nil && !errors.Is(err, wstest.ErrTimeout)
}
