package workers_test

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
)

const (
	// docPath is the API document whose examples these tests produce.
	docPath = "../../docs/api/workers.md"
	// schemaPath is the protocol's JSON Schema (C-19).
	schemaPath = "../../docs/api/workers.schema.json"
	// connectPath is the worker entry.
	connectPath = "/v1/workers/connect"
	// bound limits every wait for something that is due; it only turns a
	// hang into a failure.
	bound = 10 * time.Second
	// quiet is how long a test listens to show that a frame does not
	// come. The dispatchers of these servers poll every pollInterval, so
	// it covers several of their rounds.
	quiet = 300 * time.Millisecond
	// pollInterval is the workers.poll_interval of every test server.
	pollInterval = 50 * time.Millisecond
)

// workPermissions lets a credential work tasks and use the tasks API.
var workPermissions = []string{auth.PermTasksWork, auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel}

// Frame types of orbit.workers.v1.
const (
	typeHello    = "worker.hello"
	typeWelcome  = "worker.welcome"
	typeAssign   = "task.assign"
	typeComplete = "task.complete"
	typeRelease  = "task.release"
	typeCancel   = "task.cancel"
	typePing     = "worker.ping"
	typeAck      = "ack"
	typeError    = "error"
)

// Close codes.
const (
	closePolicyViolation = 1008
	closeTooBig          = 1009
)

// schema returns the protocol's schema, compiled once per test binary.
var schema = wstest.LoadOnce(schemaPath)

// env is a real server on a fresh database and a credential that may work
// the queue "q".
type env struct {
	srv  *servertest.Server
	cred servertest.Credential
	url  string // ws://…/v1/workers/connect
}

// workersConfig changes the workers section of a test server.
func workersConfig(change func(*workers.Config)) servertest.Option {
	return servertest.ModuleConfig("workers", change)
}

// tasksConfig changes the tasks section of a test server.
func tasksConfig(change func(*tasks.Config)) servertest.Option {
	return servertest.ModuleConfig("tasks", change)
}

// setup starts a server whose dispatchers poll every pollInterval, with the
// changes of opts.
func setup(t *testing.T, opts ...servertest.Option) *env {
	t.Helper()
	opts = append([]servertest.Option{workersConfig(func(c *workers.Config) { c.PollInterval = pollInterval })}, opts...)
	srv := servertest.Start(t, opts...)
	e := &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	e.cred = e.credential(t, "q")
	return e
}

// credential returns a new credential of namespace "ns" granted on the
// queue named queue, with workPermissions.
func (e *env) credential(t *testing.T, queue string) servertest.Credential {
	t.Helper()
	return e.srv.Credential(t, servertest.CredentialParams{Queue: queue, Permissions: workPermissions})
}

// options returns the dial options of cred; every frame is validated
// against the schema.
func (e *env) options(t *testing.T, cred servertest.Credential) wstest.Options {
	return wstest.Options{
		URL: e.url, Subprotocol: workers.Subprotocol, Token: cred.Token,
		Validator: schema(t), Timeout: bound,
	}
}

// dial opens a connection with cred and sends nothing.
func (e *env) dial(t *testing.T, cred servertest.Credential) *wstest.Client {
	t.Helper()
	return wstest.Dial(t, e.options(t, cred))
}

// helloBody is the body of worker.hello.
type helloBody struct {
	QueueID    string `json:"queue_id"`
	Capacity   int    `json:"capacity"`
	WorkerName string `json:"worker_name,omitempty"`
}

// welcomeBody is the body of worker.welcome.
type welcomeBody struct {
	SessionID           string `json:"session_id"`
	QueueID             string `json:"queue_id"`
	Capacity            int    `json:"capacity"`
	LeaseDurationMS     int64  `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	ServerTime          string `json:"server_time"`
}

// worker is a raw connection after its welcome.
type worker struct {
	*wstest.Client
	session string
	hello   *wstest.Frame
	welcome *wstest.Frame
	body    welcomeBody
}

// connect opens a worker session of cred on its queue with capacity.
func (e *env) connect(t *testing.T, cred servertest.Credential, capacity int) *worker {
	t.Helper()
	c := e.dial(t, cred)
	hello := c.NewFrame(typeHello, helloBody{QueueID: cred.QueueID, Capacity: capacity, WorkerName: "worker-1"})
	c.SendFrame(hello)
	welcome := c.Reply(hello.MessageID)
	if welcome.Type != typeWelcome {
		t.Fatalf("answer to hello: %s, want worker.welcome", welcome)
	}
	w := &worker{Client: c, hello: hello, welcome: welcome}
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

// assignment is the body of task.assign.
type assignment struct {
	Task struct {
		ID          string          `json:"id"`
		QueueID     string          `json:"queue_id"`
		Revision    string          `json:"revision"`
		Input       json.RawMessage `json:"input"`
		Attempts    int             `json:"attempts"`
		MaxAttempts int             `json:"max_attempts"`
		Idempotent  bool            `json:"idempotent"`
	} `json:"task"`
	AttemptID   string `json:"attempt_id"`
	Epoch       string `json:"epoch"`
	LeaseUntil  string `json:"lease_until"`
	LeaseSecret string `json:"lease_secret"`

	frame *wstest.Frame
}

// proof is the lease proof of task.complete and task.release.
type proof struct {
	TaskID      string `json:"task_id"`
	AttemptID   string `json:"attempt_id"`
	Epoch       string `json:"epoch"`
	LeaseSecret string `json:"lease_secret"`
}

func (a *assignment) proof() proof {
	return proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret}
}

// taskError is the error of a failed attempt.
type taskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// completeBody is the body of task.complete.
type completeBody struct {
	proof
	Outcome string          `json:"outcome"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *taskError      `json:"error,omitempty"`
}

// releaseBody is the body of task.release.
type releaseBody struct {
	proof
	Reason string `json:"reason"`
}

// completeAck is the body of the ack of task.complete.
type completeAck struct {
	TaskID       string `json:"task_id"`
	AttemptID    string `json:"attempt_id"`
	Outcome      string `json:"outcome"`
	State        string `json:"state"`
	Revision     string `json:"revision"`
	Deduplicated bool   `json:"deduplicated"`
}

// releaseAck is the body of the ack of task.release.
type releaseAck struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
	Released  bool   `json:"released"`
}

// cancelBody is the body of task.cancel.
type cancelBody struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
}

// settle waits until the connection's dispatcher has finished the lease it
// makes right after the welcome or after sending assignments, for tests
// whose next step must be found by a ping or a completion rather than by
// that lease (leases check the credential too).
func (w *worker) settle() { time.Sleep(quiet) }

// assign returns the next task.assign; other frames stay queued.
func (w *worker) assign(t *testing.T) *assignment {
	t.Helper()
	f := w.NextType(typeAssign)
	a := &assignment{frame: f}
	decode(t, f, a)
	return a
}

// complete sends task.complete for p and returns the answer.
func (w *worker) complete(t *testing.T, body completeBody) *wstest.Frame {
	t.Helper()
	return w.Request(typeComplete, body)
}

// succeed completes a with outcome succeeded and returns the ack's body.
func (w *worker) succeed(t *testing.T, a *assignment) completeAck {
	t.Helper()
	return wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}))
}

// ping sends worker.ping and returns the answer.
func (w *worker) ping(t *testing.T) *wstest.Frame {
	t.Helper()
	return w.Request(typePing, struct{}{})
}

// wantCompleteAck checks that f is an ack of task.complete and returns its
// body.
func wantCompleteAck(t *testing.T, f *wstest.Frame) completeAck {
	t.Helper()
	if f.Type != typeAck {
		t.Fatalf("answer %s, want ack", f)
	}
	var ack completeAck
	decode(t, f, &ack)
	return ack
}

// wantError checks that f is an error frame with code.
func wantError(t *testing.T, f *wstest.Frame, code string) {
	t.Helper()
	if f.Type != typeError || f.Error == nil || f.Error.Code != code {
		t.Fatalf("answer %s, want an error %s", f, code)
	}
	if f.Body != nil {
		t.Fatalf("error frame with a body: %s", f)
	}
}

// wantPingAck checks that f is the ack of a ping.
func wantPingAck(t *testing.T, f *wstest.Frame) {
	t.Helper()
	var ack struct {
		ServerTime string `json:"server_time"`
	}
	if f.Type != typeAck {
		t.Fatalf("answer to ping %s, want ack", f)
	}
	decode(t, f, &ack)
	if _, err := time.Parse(time.RFC3339Nano, ack.ServerTime); err != nil {
		t.Fatalf("ping ack server_time: %v", err)
	}
}

// newKey returns a fresh Idempotency-Key.
func newKey() string { return "key-" + rand.Text() }

// submitParams describe a task to submit.
type submitParams struct {
	Input       string // JSON text; default {}
	Idempotent  bool
	MaxAttempts int // default 3
	// Header holds extra request headers, such as traceparent.
	Header http.Header
}

// submit submits a task to cred's queue and returns its id.
func (e *env) submit(t *testing.T, cred servertest.Credential, p submitParams) string {
	t.Helper()
	if p.Input == "" {
		p.Input = "{}"
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	body := fmt.Sprintf(`{"queue_id":%q,"input":%s,"idempotent":%v,"max_attempts":%d}`, cred.QueueID, p.Input, p.Idempotent, p.MaxAttempts)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: newKey(), Body: body, Header: p.Header})
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
	return receipt.Task.ID
}

// submitMany submits n tasks with input {} to cred's queue from several
// goroutines, and returns when all are submitted.
func (e *env) submitMany(t *testing.T, cred servertest.Credential, n int, idempotent bool) {
	t.Helper()
	const senders = 8
	body := fmt.Sprintf(`{"queue_id":%q,"input":{},"idempotent":%v}`, cred.QueueID, idempotent)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := postTask(e.srv.URL, cred.Token, body); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// postTask submits one task; it may run outside the test goroutine.
func postTask(baseURL, token, body string) error {
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/tasks", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", newKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("submit: status %d", resp.StatusCode)
	}
	return nil
}

// task reads a task through GET /v1/tasks/{id}.
func (e *env) task(t *testing.T, cred servertest.Credential, id string) tasks.TaskView {
	t.Helper()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/tasks/" + id, Token: cred.Token})
	if r.Status != http.StatusOK {
		t.Fatalf("get task: %d %s", r.Status, r.Body)
	}
	var v tasks.TaskView
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// cancel cancels a task through POST /v1/tasks/{id}:cancel.
func (e *env) cancel(t *testing.T, cred servertest.Credential, id string) tasks.TaskView {
	t.Helper()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks/" + id + ":cancel", Token: cred.Token, IdempotencyKey: newKey(), Body: `{}`})
	if r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Task tasks.TaskView `json:"task"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Task
}

// waitState polls the task until it is in state, within bound.
func (e *env) waitState(t *testing.T, cred servertest.Credential, id, state string) tasks.TaskView {
	t.Helper()
	var v tasks.TaskView
	eventually(t, "task "+id+" in state "+state, func() bool {
		v = e.task(t, cred, id)
		return v.State == state
	})
	return v
}

// eventually polls cond every 20 ms until it holds, and fails the test if
// it does not within bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attemptRow is a row of task_attempts.
type attemptRow struct {
	TaskID     string
	SessionID  string
	Epoch      uint64
	Digest     []byte
	LeaseUntil time.Time
	State      string
}

// attempt reads the attempt id from the database; ok is false when there
// is no such row.
func (e *env) attempt(t *testing.T, id string) (attemptRow, bool) {
	t.Helper()
	var a attemptRow
	err := e.srv.DB.QueryRowContext(context.Background(),
		`SELECT task_id, session_id, epoch, lease_secret_digest, lease_until, state FROM task_attempts WHERE id = ?`, id).
		Scan(&a.TaskID, &a.SessionID, &a.Epoch, &a.Digest, &a.LeaseUntil, &a.State)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return a, true
}

// count runs a COUNT(*) query.
func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.srv.DB.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// event is a row of the result log.
type event struct {
	Type    string
	Details struct {
		State     string `json:"state"`
		Reason    string `json:"reason"`
		ErrorCode string `json:"error_code"`
	}
	Snapshot struct {
		State           string `json:"state"`
		EffectUncertain bool   `json:"effect_uncertain"`
	}
}

// events returns the result-log events of a task in sequence order.
func (e *env) events(t *testing.T, taskID string) []event {
	t.Helper()
	rows, err := e.srv.DB.QueryContext(context.Background(),
		`SELECT type, details, snapshot FROM result_events WHERE task_id = ? ORDER BY sequence`, taskID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []event
	for rows.Next() {
		var ev event
		var details, snapshot []byte
		if err := rows.Scan(&ev.Type, &details, &snapshot); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(details, &ev.Details); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(snapshot, &ev.Snapshot); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eventSummary returns "type/state/reason" for each event, for comparisons.
func eventSummary(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type + "/" + ev.Details.State + "/" + ev.Details.Reason
	}
	return out
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
func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return v
}
