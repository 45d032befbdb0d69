package tasks_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
)

type batchResult struct {
	IdempotencyKey string          `json:"idempotency_key"`
	Status         int             `json:"status"`
	Data           json.RawMessage `json:"data"`
	Error          *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (e *env) batch(t *testing.T, c servertest.Credential, body string) []batchResult {
	t.Helper()
	r := e.post(t, c, "/v1/tasks:batch", "", body)
	wantStatus(t, r, http.StatusOK)
	var reply struct {
		Results []batchResult `json:"results"`
	}
	if err := json.Unmarshal(r.Data, &reply); err != nil {
		t.Fatalf("batch reply: %v: %s", err, r.Body)
	}
	return reply.Results
}

func (b batchResult) receipt(t *testing.T) receipt {
	t.Helper()
	var rc receipt
	if err := json.Unmarshal(b.Data, &rc); err != nil {
		t.Fatalf("item %s: %v: %s", b.IdempotencyKey, err, b.Data)
	}
	return rc
}

// TestTBatch_EachItemOnItsOwn: a batch submits its valid items in one
// commit and answers each item as POST /v1/tasks with the item's key would
// have: a task created (201), a queue outside the grants (404 NOT_FOUND),
// a rule broken (400); the answers are in the order of the items.
// Repeating the batch creates nothing again: each created item gets its
// original receipt, deduplicated, and a refused item is judged afresh.
func TestTBatch_EachItemOnItsOwn(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "batch")
	other := e.cred(t, "batch-other")
	body := fmt.Sprintf(`{"tasks":[
		{"idempotency_key":"order-A-17","queue_id":%q,"input":{"order":"A-17"},"idempotent":true},
		{"idempotency_key":"order-A-18","queue_id":%q,"input":{"order":"A-18"},"max_attempts":5},
		{"idempotency_key":"order-A-19","queue_id":%q,"input":{"order":"A-19"}},
		{"idempotency_key":"order-A-20","queue_id":%q,"input":{"order":"A-20"},"max_attempts":0}
	]}`, c.QueueID, c.QueueID, other.QueueID, c.QueueID)
	first := e.post(t, c, "/v1/tasks:batch", "", body)
	wantStatus(t, first, http.StatusOK)
	doctest.Check(t, docPath, "tasks-batch-request", []byte(body))
	doctest.Check(t, docPath, "tasks-batch-response", first.Body)
	results := e.batch(t, c, body) // the repeat
	var reply struct {
		Results []batchResult `json:"results"`
	}
	if err := json.Unmarshal(first.Data, &reply); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key    string
		status int
		code   string
	}{
		{"order-A-17", 201, ""}, {"order-A-18", 201, ""},
		{"order-A-19", 404, string(httpx.CodeNotFound)}, {"order-A-20", 400, string(httpx.CodeInvalidArgument)},
	}
	if len(reply.Results) != len(want) || len(results) != len(want) {
		t.Fatalf("%d and %d results, want %d: %s", len(reply.Results), len(results), len(want), first.Body)
	}
	for i, w := range want {
		got := reply.Results[i]
		if got.IdempotencyKey != w.key || got.Status != w.status || (w.code == "") != (got.Error == nil) || (got.Error != nil && got.Error.Code != w.code) {
			t.Errorf("item %d = %+v, want %s %d %s", i, got, w.key, w.status, w.code)
		}
		again := results[i]
		if w.code != "" {
			if again.Status != w.status || again.Error == nil || again.Error.Code != w.code {
				t.Errorf("repeat of refused item %d = %+v, want %d %s again", i, again, w.status, w.code)
			}
			continue
		}
		rc, rc2 := got.receipt(t), again.receipt(t)
		if rc.Deduplicated || !rc2.Deduplicated || again.Status != http.StatusOK || rc2.Task.ID != rc.Task.ID {
			t.Errorf("item %d: first %d %+v, repeat %d %+v; want 201 then 200 deduplicated with the same task", i, got.Status, rc, again.Status, rc2)
		}
		if task := e.task(t, c, rc.Task.ID); task.QueueID != c.QueueID || task.State != "PENDING" {
			t.Errorf("item %d: task %+v", i, task)
		}
	}
	var n int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM tasks WHERE queue_id IN (?, ?)`, c.QueueID, other.QueueID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d tasks after the batch and its repeat, want 2", n)
	}
}

// TestTBatch_KeysAreThoseOfSubmit: an item's key is the Idempotency-Key of
// POST /v1/tasks for the same credential: a single submit and a batch item
// with the same key and the same task are one write, whichever comes
// first, and the same key with another task is IDEMPOTENCY_CONFLICT for
// that item alone.
func TestTBatch_KeysAreThoseOfSubmit(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "batch-keys")
	single := e.post(t, c, "/v1/tasks", "k-single", submitBody(c.QueueID, `{"n":1}`))
	wantStatus(t, single, http.StatusCreated)
	results := e.batch(t, c, fmt.Sprintf(`{"tasks":[
		{"queue_id":%q,"input":{"n":1},"idempotency_key":"k-single"},
		{"idempotency_key":"k-batch","queue_id":%q,"input":{"n":2}},
		{"idempotency_key":"k-conflict","queue_id":%q,"input":{"n":3}}
	]}`, c.QueueID, c.QueueID, c.QueueID))
	if rc := results[0].receipt(t); results[0].Status != 200 || !rc.Deduplicated || rc.Task.ID != decodeReceipt(t, single).Task.ID {
		t.Errorf("item with the single submit's key = %d %s, want 200 with the single submit's task, deduplicated", results[0].Status, results[0].Data)
	}
	if results[1].Status != 201 || results[2].Status != 201 {
		t.Fatalf("new items: %+v", results[1:])
	}
	replay := e.post(t, c, "/v1/tasks", "k-batch", submitBody(c.QueueID, `{"n":2}`))
	wantStatus(t, replay, http.StatusOK)
	if rc := decodeReceipt(t, replay); !rc.Deduplicated || rc.Task.ID != results[1].receipt(t).Task.ID {
		t.Errorf("single submit with a batch item's key: %s, want the item's task, deduplicated", replay.Body)
	}
	again := e.batch(t, c, fmt.Sprintf(`{"tasks":[
		{"idempotency_key":"k-conflict","queue_id":%q,"input":{"n":4}},
		{"idempotency_key":"k-new","queue_id":%q,"input":{"n":5}}
	]}`, c.QueueID, c.QueueID))
	if again[0].Status != 409 || again[0].Error == nil || again[0].Error.Code != string(httpx.CodeIdempotencyConflict) {
		t.Errorf("reused key with another task: %+v, want 409 IDEMPOTENCY_CONFLICT", again[0])
	}
	if again[1].Status != 201 {
		t.Errorf("the other item of that batch: %+v, want 201", again[1])
	}
}

// TestTBatch_RefusedWhole: what is wrong with the batch itself refuses it
// whole with 400 and stores nothing: no tasks, more than 500, an item
// without a valid key, two items with one key, an unknown member.
func TestTBatch_RefusedWhole(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "batch-whole")
	item := func(key string) string {
		return fmt.Sprintf(`{"idempotency_key":%q,"queue_id":%q,"input":{}}`, key, c.QueueID)
	}
	many := make([]string, 501)
	for i := range many {
		many[i] = item(fmt.Sprintf("k-%d", i))
	}
	for name, body := range map[string]string{
		"NoTasks":       `{}`,
		"Empty":         `{"tasks":[]}`,
		"TooMany":       `{"tasks":[` + strings.Join(many, ",") + `]}`,
		"MissingKey":    fmt.Sprintf(`{"tasks":[%s,{"queue_id":%q,"input":{}}]}`, item("k-1"), c.QueueID),
		"MalformedKey":  `{"tasks":[` + item("not a key") + `]}`,
		"RepeatedKey":   `{"tasks":[` + item("k-1") + `,` + item("k-1") + `]}`,
		"UnknownMember": fmt.Sprintf(`{"tasks":[{"idempotency_key":"k-1","queue_id":%q,"input":{},"priority":1}]}`, c.QueueID),
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, e.post(t, c, "/v1/tasks:batch", "", body), http.StatusBadRequest, string(httpx.CodeInvalidArgument))
		})
	}
	n := e.taskCount(t, c.QueueID)
	if n != 0 {
		t.Errorf("%d tasks after refused batches, want 0", n)
	}
}

// TestTBatch_ConcurrentRepeatsCreateOnce: the same batch sent four times at
// once creates each task once; every answer names, per key, the same task,
// created by exactly one of them.
func TestTBatch_ConcurrentRepeatsCreateOnce(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "batch-race")
	const n, senders = 50, 4
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"idempotency_key":"race-%d","queue_id":%q,"input":{"i":%d}}`, i, c.QueueID, i)
	}
	body := `{"tasks":[` + strings.Join(items, ",") + `]}`
	answers := make([][]batchResult, senders)
	done := make(chan int, senders)
	for s := range senders {
		go func() {
			r := e.post(t, c, "/v1/tasks:batch", "", body)
			if r.Status == http.StatusOK {
				var reply struct {
					Results []batchResult `json:"results"`
				}
				if err := json.Unmarshal(r.Data, &reply); err == nil {
					answers[s] = reply.Results
				}
			} else {
				t.Errorf("sender %d: %d %s", s, r.Status, r.Body)
			}
			done <- s
		}()
	}
	for range senders {
		<-done
	}
	for i := range n {
		created, id := 0, ""
		for s := range senders {
			if len(answers[s]) != n {
				t.Fatalf("sender %d got %d results", s, len(answers[s]))
			}
			r := answers[s][i]
			if r.Status == http.StatusCreated {
				created++
			} else if r.Status != http.StatusOK {
				t.Errorf("key %d, sender %d: %+v", i, s, r)
				continue
			}
			rc := r.receipt(t)
			if id != "" && rc.Task.ID != id {
				t.Errorf("key %d: tasks %s and %s", i, id, rc.Task.ID)
			}
			id = rc.Task.ID
		}
		if created != 1 {
			t.Errorf("key %d created %d times", i, created)
		}
	}
	count := e.taskCount(t, c.QueueID)
	if count != n {
		t.Errorf("%d tasks, want %d", count, n)
	}
}

// TestTBatch_LargeBatchIsWrittenWhole: a batch of the largest size, near
// the body limit, is written by several INSERTs in its one transaction:
// every item is created with its own input.
func TestTBatch_LargeBatchIsWrittenWhole(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "batch-large")
	filler := strings.Repeat("x", 900)
	items := make([]string, tasks.MaxBatchTasks)
	for i := range items {
		items[i] = fmt.Sprintf(`{"idempotency_key":"large-%d","queue_id":%q,"input":{"n":%d,"filler":%q}}`, i, c.QueueID, i, filler)
	}
	results := e.batch(t, c, `{"tasks":[`+strings.Join(items, ",")+`]}`)
	if len(results) != len(items) {
		t.Fatalf("%d results, want %d", len(results), len(items))
	}
	for i, res := range results {
		if res.Status != http.StatusCreated {
			t.Fatalf("item %d: %+v", i, res)
		}
	}
	rows, err := e.srv.DB.Query(`SELECT id, input FROM tasks WHERE queue_id = ?`, c.QueueID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	inputs := map[string]string{}
	for rows.Next() {
		var id, input string
		if err := rows.Scan(&id, &input); err != nil {
			t.Fatal(err)
		}
		inputs[id] = input
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(inputs) != len(items) {
		t.Fatalf("%d tasks stored, want %d", len(inputs), len(items))
	}
	for i, res := range results {
		var in struct {
			N      int    `json:"n"`
			Filler string `json:"filler"`
		}
		id := res.receipt(t).Task.ID
		if err := json.Unmarshal([]byte(inputs[id]), &in); err != nil || in.N != i || in.Filler != filler {
			t.Fatalf("item %d: task %s holds %.40q (%v)", i, id, inputs[id], err)
		}
	}
}
