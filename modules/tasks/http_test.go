package tasks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// docPath is the API document whose examples these tests produce.
const docPath = "../../docs/api/tasks.md"

// allTaskPermissions lets a credential use every endpoint of the tasks API.
var allTaskPermissions = []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel, auth.PermTasksReview}

var (
	decimalPattern = regexp.MustCompile(`^"(0|[1-9][0-9]*)"$`)
	timePattern    = regexp.MustCompile(`^"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"$`)
	idPattern      = regexp.MustCompile(`^"[0-9a-f]{32}"$`)
)

// env is a real server on a fresh database whose lease sweeper never runs
// on its own, so that a test decides when leases expire.
type env struct {
	srv   *servertest.Server
	store *tasks.Store
	// expireMu serialises AttemptRecover: with SKIP LOCKED, a call that
	// overlaps another could return before the other has committed the
	// lease a test waits for.
	expireMu sync.Mutex
}

func startServer(t *testing.T) *env {
	t.Helper()
	srv := servertest.Start(t, servertest.ModuleConfig("tasks", func(c *tasks.Config) { c.SweepInterval = time.Hour }))
	return &env{srv: srv, store: srv.Instances["tasks"].(*tasks.Module).Store()}
}

// cred returns a credential granted on the queue named queue in namespace
// "ns", with perms or, when none are given, every tasks permission.
func (e *env) cred(t *testing.T, queue string, perms ...string) servertest.Credential {
	t.Helper()
	if len(perms) == 0 {
		perms = allTaskPermissions
	}
	return e.srv.Credential(t, servertest.CredentialParams{Queue: queue, Permissions: perms})
}

// taskCount returns how many tasks the queue holds.
func (e *env) taskCount(t *testing.T, queueID string) int {
	t.Helper()
	var n int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM tasks WHERE queue_id = ?`, queueID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// newKey returns a fresh Idempotency-Key.
func newKey() string { return "key-" + rand.Text() }

func (e *env) post(t *testing.T, c servertest.Credential, path, key, body string) *servertest.Response {
	t.Helper()
	return e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: c.Token, IdempotencyKey: key, Body: body})
}

func (e *env) get(t *testing.T, c servertest.Credential, path string) *servertest.Response {
	t.Helper()
	return e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path, Token: c.Token})
}

func submitBody(queueID, input string) string {
	return `{"queue_id":"` + queueID + `","input":` + input + `}`
}

// submit submits body with a fresh key and returns the task of the receipt.
func (e *env) submit(t *testing.T, c servertest.Credential, body string) tasks.TaskView {
	t.Helper()
	r := e.post(t, c, "/v1/tasks", newKey(), body)
	wantStatus(t, r, http.StatusCreated)
	return decodeReceipt(t, r).Task
}

func (e *env) cancel(t *testing.T, c servertest.Credential, id, body string) *servertest.Response {
	t.Helper()
	return e.post(t, c, "/v1/tasks/"+id+":cancel", newKey(), body)
}

func (e *env) review(t *testing.T, c servertest.Credential, id, body string) *servertest.Response {
	t.Helper()
	return e.post(t, c, "/v1/tasks/"+id+":review", newKey(), body)
}

// task reads a task through GET /v1/tasks/{id}.
func (e *env) task(t *testing.T, c servertest.Credential, id string) tasks.TaskView {
	t.Helper()
	r := e.get(t, c, "/v1/tasks/"+id)
	wantStatus(t, r, http.StatusOK)
	return decodeTask(t, r.Data)
}

// leased is an assignment and the worker session that holds it.
type leased struct {
	tasks.Assignment
	Session string
	Grant   auth.Grant
}

// lease leases the only available task of c's queue, which must be id, to a
// new worker session for d (negative: already expired).
func (e *env) lease(t *testing.T, c servertest.Credential, id string, d time.Duration) leased {
	t.Helper()
	ctx := context.Background()
	grant := e.srv.WorkerGrant(t, c)
	session, err := e.store.WorkerSessionOpen(ctx, &tasks.WorkerSessionOpenParams{QueueID: c.QueueID, CredentialID: grant.CredentialID, WorkerName: "test", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	assigned, _, err := e.store.AttemptLease(ctx, session, grant, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(assigned) != 1 || assigned[0].Task.ID != id {
		t.Fatalf("leased %d tasks, want exactly task %s", len(assigned), id)
	}
	return leased{Assignment: assigned[0], Session: session, Grant: grant}
}

// complete reports an outcome for a lease as its worker would.
func (e *env) complete(t *testing.T, a leased, p tasks.AttemptCompleteParams) {
	t.Helper()
	p.Proof = tasks.Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret}
	p.Grant = a.Grant
	if _, _, err := e.store.AttemptComplete(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
}

// expireLeases recovers every lease whose time has run out.
func (e *env) expireLeases(t *testing.T) {
	t.Helper()
	e.expireMu.Lock()
	defer e.expireMu.Unlock()
	if _, err := e.store.AttemptRecover(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
}

// needsReview submits body on c's queue, which must have no other available
// task, and drives it to NEEDS_REVIEW through an expired lease.
func (e *env) needsReview(t *testing.T, c servertest.Credential, body string) tasks.TaskView {
	t.Helper()
	task := e.submit(t, c, body)
	e.lease(t, c, task.ID, -time.Second)
	e.expireLeases(t)
	got := e.task(t, c, task.ID)
	if got.State != tasks.StateNeedsReview {
		t.Fatalf("state after the lease expired = %s, want NEEDS_REVIEW", got.State)
	}
	return got
}

// events returns every event of a queue's result log.
func (e *env) events(t *testing.T, queueID string) []tasks.Event {
	t.Helper()
	events, err := tasks.EventListAfter(context.Background(), e.srv.DB, queueID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

type receipt struct {
	Task         tasks.TaskView `json:"task"`
	Deduplicated bool           `json:"deduplicated"`
}

func decodeReceipt(t *testing.T, r *servertest.Response) receipt {
	t.Helper()
	var rc receipt
	if err := json.Unmarshal(r.Data, &rc); err != nil {
		t.Fatalf("receipt: %v: %s", err, r.Body)
	}
	return rc
}

func decodeSnapshot(t *testing.T, raw json.RawMessage) tasks.Snapshot {
	t.Helper()
	var s tasks.Snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("snapshot: %v: %s", err, raw)
	}
	return s
}

func decodeTask(t *testing.T, raw json.RawMessage) tasks.TaskView {
	t.Helper()
	var v tasks.TaskView
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("task: %v: %s", err, raw)
	}
	return v
}

// members returns the members of a JSON object as raw values.
func members(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	return m
}

// wantMembers checks that a JSON object has exactly the named members.
func wantMembers(t *testing.T, what string, raw json.RawMessage, want ...string) map[string]json.RawMessage {
	t.Helper()
	m := members(t, raw)
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s has members %v, want exactly %v", what, got, want)
	}
	return m
}

// wantJSON checks that raw is the same JSON value as want, member order aside.
func wantJSON(t *testing.T, what string, raw json.RawMessage, want string) {
	t.Helper()
	if !sameJSON(t, raw, []byte(want)) {
		t.Errorf("%s = %s, want %s", what, raw, want)
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(decodeAny(t, a), decodeAny(t, b))
}

// decodeAny decodes JSON keeping numbers as their text.
func decodeAny(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return v
}

func wantStatus(t *testing.T, r *servertest.Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
}

func wantError(t *testing.T, r *servertest.Response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code() != code {
		t.Fatalf("got %d %q, want %d %s: %s", r.Status, r.Code(), status, code, r.Body)
	}
}

func wantState(t *testing.T, got tasks.TaskView, state string, revision uint64) {
	t.Helper()
	if got.State != state || uint64(got.Revision) != revision {
		t.Fatalf("task %s is %s at revision %d, want %s at revision %d", got.ID, got.State, got.Revision, state, revision)
	}
}

// taskMembers are the members every task object has (03-tasks-and-workers.md).
var taskMembers = []string{
	"id", "queue_id", "state", "revision", "idempotent", "max_attempts", "attempts",
	"effect_uncertain", "cancel_requested", "created_at", "updated_at",
}

func with(extra ...string) []string { return append(slices.Clone(taskMembers), extra...) }

func TestTaskShape(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "shape")
	const big = "12345678901234567890123"
	input := `{"order":"A-17","amount":` + big + `,"lines":[{"sku":"X1","qty":2}]}`
	submit := `{"queue_id":"` + c.QueueID + `","input":` + input + `,"idempotent":true,"max_attempts":5}`

	first := e.post(t, c, "/v1/tasks", newKey(), submit)
	wantStatus(t, first, http.StatusCreated)
	doctest.Check(t, docPath, "tasks-submit-request", []byte(submit))
	doctest.Check(t, docPath, "tasks-submit-response", first.Body)
	receiptTask := wantMembers(t, "submit receipt", first.Data, "task", "deduplicated")["task"]
	task := decodeTask(t, receiptTask)

	t.Run("SubmitReceipt", func(t *testing.T) {
		m := wantMembers(t, "task in the receipt", receiptTask, taskMembers...)
		wantJSON(t, "state", m["state"], `"PENDING"`)
		wantJSON(t, "queue_id", m["queue_id"], `"`+c.QueueID+`"`)
		wantJSON(t, "idempotent", m["idempotent"], `true`)
		wantJSON(t, "max_attempts", m["max_attempts"], `5`)
		wantJSON(t, "attempts", m["attempts"], `0`)
		wantJSON(t, "effect_uncertain", m["effect_uncertain"], `false`)
		wantJSON(t, "cancel_requested", m["cancel_requested"], `false`)
		if string(m["revision"]) != `"1"` {
			t.Errorf("revision = %s, want the decimal string \"1\"", m["revision"])
		}
		if !idPattern.Match(m["id"]) {
			t.Errorf("id = %s, want 32 lowercase hex characters", m["id"])
		}
		for _, k := range []string{"created_at", "updated_at"} {
			if !timePattern.Match(m[k]) {
				t.Errorf("%s = %s, want RFC 3339 UTC with Z", k, m[k])
			}
		}
		if string(m["created_at"]) != string(m["updated_at"]) {
			t.Errorf("a new task has created_at %s and updated_at %s, want the same", m["created_at"], m["updated_at"])
		}
	})

	t.Run("GetHasInput", func(t *testing.T) {
		r := e.get(t, c, "/v1/tasks/"+task.ID)
		wantStatus(t, r, http.StatusOK)
		m := wantMembers(t, "task", r.Data, with("input")...)
		if !bytes.Contains(m["input"], []byte(`"amount":`+big)) {
			t.Errorf("input = %s, want the big integer %s exactly", m["input"], big)
		}
		wantJSON(t, "input", m["input"], input)
	})

	t.Run("ListHasNoInput", func(t *testing.T) {
		r := e.get(t, c, "/v1/tasks?queue_id="+c.QueueID)
		wantStatus(t, r, http.StatusOK)
		var page struct{ Items []json.RawMessage }
		if err := json.Unmarshal(r.Data, &page); err != nil || len(page.Items) != 1 {
			t.Fatalf("list: %v: %s", err, r.Body)
		}
		wantMembers(t, "listed task", page.Items[0], taskMembers...)
	})

	lease := e.lease(t, c, task.ID, time.Minute)
	t.Run("RunningHasItsAttempt", func(t *testing.T) {
		r := e.get(t, c, "/v1/tasks/"+task.ID)
		m := wantMembers(t, "running task", r.Data, with("input", "current_attempt_id")...)
		wantJSON(t, "current_attempt_id", m["current_attempt_id"], `"`+lease.AttemptID+`"`)
		got := decodeTask(t, r.Data)
		wantState(t, got, tasks.StateRunning, 2)
		if got.Attempts != 1 {
			t.Errorf("attempts = %d, want 1", got.Attempts)
		}
	})

	result := `{"total":` + big + `,"ratio":0.1,"tiny":1e-400}`
	e.complete(t, lease, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeSucceeded, Result: []byte(result)})
	t.Run("SucceededHasResultExactly", func(t *testing.T) {
		r := e.get(t, c, "/v1/tasks/"+task.ID)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "tasks-get-response", r.Body)
		m := wantMembers(t, "succeeded task", r.Data, with("input", "current_attempt_id", "result", "finished_at")...)
		for _, literal := range []string{`"total":` + big, `"tiny":1e-400`} {
			if !bytes.Contains(m["result"], []byte(literal)) {
				t.Errorf("result = %s, want %s exactly as reported", m["result"], literal)
			}
		}
		if !timePattern.Match(m["finished_at"]) {
			t.Errorf("finished_at = %s", m["finished_at"])
		}
		wantState(t, decodeTask(t, r.Data), tasks.StateSucceeded, 3)
		list := e.get(t, c, "/v1/tasks?queue_id="+c.QueueID)
		if !bytes.Contains(list.Body, []byte(`"total":`+big)) {
			t.Errorf("the listed result lost the big integer: %s", list.Body)
		}
	})

	t.Run("FailedHasError", func(t *testing.T) {
		failed := e.submit(t, c, `{"queue_id":"`+c.QueueID+`","input":{"k":1},"max_attempts":1}`)
		a := e.lease(t, c, failed.ID, time.Minute)
		e.complete(t, a, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeFailed, ErrorCode: "CARD_DECLINED", ErrorMessage: "the card was declined"})
		r := e.get(t, c, "/v1/tasks/"+failed.ID)
		m := wantMembers(t, "failed task", r.Data, with("input", "current_attempt_id", "error", "finished_at")...)
		wantJSON(t, "error", m["error"], `{"code":"CARD_DECLINED","message":"the card was declined"}`)
		wantState(t, decodeTask(t, r.Data), tasks.StateFailed, 3)
	})
}

func TestC8_StrictInput(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "strict")
	q := c.QueueID
	long := func(n int) string { return `"` + strings.Repeat("x", n-2) + `"` } // a JSON string of n bytes
	for _, tc := range []struct{ name, path, contentType, body string }{
		{name: "UnknownField", body: `{"queue_id":"` + q + `","input":{},"priority":1}`},
		{name: "FieldInAnotherCase", body: `{"Queue_id":"` + q + `","input":{}}`},
		{name: "DuplicateKey", body: `{"queue_id":"` + q + `","queue_id":"` + q + `","input":{}}`},
		{name: "DuplicateKeyInInput", body: `{"queue_id":"` + q + `","input":{"a":1,"a":2}}`},
		{name: "TrailingData", body: `{"queue_id":"` + q + `","input":{}} {}`},
		{name: "InvalidUTF8", body: `{"queue_id":"` + q + `","input":"` + "\xff" + `"}`},
		{name: "NotAnObject", body: `[]`},
		{name: "MissingQueueID", body: `{"input":{}}`},
		{name: "NullQueueID", body: `{"queue_id":null,"input":{}}`},
		{name: "MissingInput", body: `{"queue_id":"` + q + `"}`},
		{name: "InvalidQueueID", body: submitBody(strings.ToUpper(q), `{}`)},
		{name: "ShortQueueID", body: submitBody(q[:31], `{}`)},
		{name: "MaxAttemptsZero", body: `{"queue_id":"` + q + `","input":{},"max_attempts":0}`},
		{name: "MaxAttempts101", body: `{"queue_id":"` + q + `","input":{},"max_attempts":101}`},
		{name: "MaxAttemptsString", body: `{"queue_id":"` + q + `","input":{},"max_attempts":"3"}`},
		{name: "MaxAttemptsFraction", body: `{"queue_id":"` + q + `","input":{},"max_attempts":2.5}`},
		{name: "IdempotentString", body: `{"queue_id":"` + q + `","input":{},"idempotent":"true"}`},
		{name: "InputTooLarge", body: submitBody(q, long(tasks.MaxInputBytes+1))},
		{name: "BodyTooLarge", body: submitBody(q, long(513<<10))},
		{name: "WrongContentType", contentType: "text/plain", body: submitBody(q, `{}`)},
		{name: "QueryParameter", path: "/v1/tasks?dry_run=1", body: submitBody(q, `{}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/tasks"
			}
			r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: c.Token, IdempotencyKey: newKey(), Body: tc.body, ContentType: tc.contentType})
			wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
		})
	}
	t.Run("NothingWasCreated", func(t *testing.T) {
		r := e.get(t, c, "/v1/tasks?queue_id="+q)
		wantJSON(t, "list", r.Data, `{"items":[]}`)
	})
	t.Run("LimitsAreInclusive", func(t *testing.T) {
		for _, body := range []string{
			submitBody(q, long(tasks.MaxInputBytes)),
			`{"queue_id":"` + q + `","input":{},"max_attempts":1}`,
			`{"queue_id":"` + q + `","input":{},"max_attempts":100}`,
			`{"queue_id":"` + q + `","input":null,"idempotent":false}`,
		} {
			e.submit(t, c, body)
		}
	})
	t.Run("MaxAttemptsDefault", func(t *testing.T) {
		if got := e.submit(t, c, submitBody(q, `[1,2]`)); got.MaxAttempts != tasks.DefaultMaxAttempts || got.Idempotent {
			t.Fatalf("max_attempts %d idempotent %v, want %d and false", got.MaxAttempts, got.Idempotent, tasks.DefaultMaxAttempts)
		}
	})
}

func TestC9_QueryParameters(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "query")
	task := e.submit(t, c, submitBody(c.QueueID, `{}`))
	list := "/v1/tasks?queue_id=" + c.QueueID
	for _, tc := range []struct{ name, path string }{
		{"ListWithoutQueue", "/v1/tasks"},
		{"ListUnknownParameter", list + "&sort=asc"},
		{"ListRepeatedParameter", list + "&state=PENDING&state=RUNNING"},
		{"ListEmptyParameter", list + "&state="},
		{"ListUnknownState", list + "&state=pending"},
		{"ListInvalidQueue", "/v1/tasks?queue_id=" + strings.ToUpper(c.QueueID)},
		{"ListLimitZero", list + "&limit=0"},
		{"ListLimit101", list + "&limit=101"},
		{"ListLimitLeadingZero", list + "&limit=05"},
		{"ListLimitNotANumber", list + "&limit=ten"},
		{"ListMalformedCursor", list + "&cursor=not-a-cursor"},
		{"GetWithParameter", "/v1/tasks/" + task.ID + "?fields=input"},
		{"GetInvalidID", "/v1/tasks/" + strings.ToUpper(task.ID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.get(t, c, tc.path), http.StatusBadRequest, "INVALID_ARGUMENT")
		})
	}
	t.Run("ListLimitBounds", func(t *testing.T) {
		for _, limit := range []string{"1", "100"} {
			wantStatus(t, e.get(t, c, list+"&limit="+limit), http.StatusOK)
		}
	})
	t.Run("WrongMethod", func(t *testing.T) {
		r := e.srv.Do(t, servertest.Request{Method: http.MethodDelete, Path: "/v1/tasks/" + task.ID, Token: c.Token})
		wantError(t, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	})
}
