package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

const (
	testToken   = "orbit_testtoken0123456789"
	testQueueID = "11111111111111111111111111111111"
	testTaskID  = "66666666666666666666666666666666"
	testReqID   = "abcdefabcdefabcdefabcdefabcdef01"
)

// recorded is what a fake API server saw of one request.
type recorded struct {
	method, path, rawQuery string
	header                 http.Header
	body                   []byte
}

// setupAPI starts a fake API server that records each request and answers
// with status and body, and returns a client for it.
func setupAPI(t *testing.T, status int, body string) (*Client, <-chan recorded) {
	t.Helper()
	reqs := make(chan recorded, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- recorded{method: r.Method, path: r.URL.EscapedPath(), rawQuery: r.URL.RawQuery, header: r.Header.Clone(), body: b}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-ID", testReqID)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, testToken, WithHTTPClient(srv.Client()), WithUserAgent("orbit-test/1"))
	if err != nil {
		t.Fatal(err)
	}
	return c, reqs
}

// dataBody wraps data in the success envelope.
func dataBody(data string) string {
	return `{"request_id":"` + testReqID + `","data":` + data + `}`
}

const taskJSON = `{"id":"` + testTaskID + `","queue_id":"` + testQueueID + `","state":"PENDING",
	"revision":"18446744073709551615","idempotent":true,"max_attempts":3,"attempts":0,
	"effect_uncertain":false,"cancel_requested":false,"input":{"n":123456789012345678901234567890},
	"created_at":"2026-09-17T10:00:00Z","updated_at":"2026-09-17T10:00:00.25Z"}`

// jsonKeys decodes a JSON object and returns it as a map of raw values.
func jsonKeys(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %s: %v", b, err)
	}
	return m
}

func TestClientSubmitTaskSendsHeadersAndDecodesReceipt(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusCreated, dataBody(`{"task":`+taskJSON+`,"deduplicated":false}`))
	res, err := c.SubmitTask(context.Background(), "submit:1", SubmitTaskRequest{
		QueueID: testQueueID, Input: json.RawMessage(`{"n":123456789012345678901234567890}`), Idempotent: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.method != http.MethodPost || req.path != "/v1/tasks" || req.rawQuery != "" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	for name, want := range map[string]string{
		"Authorization":   "Bearer " + testToken,
		"Content-Type":    "application/json",
		"Idempotency-Key": "submit:1",
		"User-Agent":      "orbit-test/1",
	} {
		if got := req.header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	body := jsonKeys(t, req.body)
	if len(body) != 3 || string(body["queue_id"]) != `"`+testQueueID+`"` || string(body["idempotent"]) != "true" ||
		string(body["input"]) != `{"n":123456789012345678901234567890}` {
		t.Errorf("body = %s; want queue_id, input and idempotent only", req.body)
	}
	if res.Deduplicated || res.Task.ID != testTaskID || res.Task.Revision != 18446744073709551615 {
		t.Errorf("receipt = %+v", res)
	}
	if string(res.Task.Input) != `{"n":123456789012345678901234567890}` {
		t.Errorf("input = %s; the big integer must keep its text", res.Task.Input)
	}
	if res.Task.UpdatedAt.Nanosecond() != 250_000_000 || !res.Task.FinishedAt.IsZero() {
		t.Errorf("times = %v, %v", res.Task.UpdatedAt, res.Task.FinishedAt)
	}
}

func TestClientSubmitTaskSendsMaxAttemptsOnlyWhenSet(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusCreated, dataBody(`{"task":`+taskJSON+`,"deduplicated":true}`))
	res, err := c.SubmitTask(context.Background(), "k", SubmitTaskRequest{QueueID: testQueueID, Input: json.RawMessage(`1`), MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if body := jsonKeys(t, (<-reqs).body); string(body["max_attempts"]) != "5" || string(body["idempotent"]) != "false" {
		t.Errorf("body = %v", body)
	}
	if !res.Deduplicated {
		t.Error("Deduplicated = false")
	}
}

func TestClientWritesRequireAKey(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{}`))
	ctx := context.Background()
	if _, err := c.SubmitTask(ctx, "", SubmitTaskRequest{QueueID: testQueueID}); err == nil {
		t.Error("SubmitTask without a key succeeded")
	}
	if _, err := c.CancelTask(ctx, testTaskID, "", CancelTaskRequest{}); err == nil {
		t.Error("CancelTask without a key succeeded")
	}
	if _, err := c.ReviewTask(ctx, testTaskID, "", ReviewTaskRequest{}); err == nil {
		t.Error("ReviewTask without a key succeeded")
	}
	if len(reqs) != 0 {
		t.Errorf("%d requests were sent", len(reqs))
	}
}

func TestClientReviewTaskSendsRevisionAsString(t *testing.T) {
	t.Parallel()
	receipt := dataBody(`{"task":` + taskJSON + `,"deduplicated":false}`)
	c, reqs := setupAPI(t, http.StatusOK, receipt)
	_, err := c.ReviewTask(context.Background(), testTaskID, "review:1", ReviewTaskRequest{
		ExpectedRevision: 18446744073709551615, Resolution: ResolutionRequeue, Reason: "retry it",
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.path != "/v1/tasks/"+testTaskID+":review" || req.header.Get("Idempotency-Key") != "review:1" {
		t.Errorf("request = %s, key %q", req.path, req.header.Get("Idempotency-Key"))
	}
	body := jsonKeys(t, req.body)
	if string(body["expected_revision"]) != `"18446744073709551615"` || len(body) != 3 {
		t.Errorf("body = %s; want expected_revision as a string and no result", req.body)
	}

	_, err = c.ReviewTask(context.Background(), testTaskID, "review:2", ReviewTaskRequest{
		ExpectedRevision: 0, Resolution: ResolutionSucceeded, Reason: "checked", Result: json.RawMessage(`{"ok":1}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	body = jsonKeys(t, (<-reqs).body)
	if string(body["expected_revision"]) != `"0"` || string(body["result"]) != `{"ok":1}` {
		t.Errorf("body = %v", body)
	}
}

func TestClientCancelTask(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"task":`+taskJSON+`,"deduplicated":false}`))
	if _, err := c.CancelTask(context.Background(), testTaskID, "cancel:1", CancelTaskRequest{}); err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.method != http.MethodPost || req.path != "/v1/tasks/"+testTaskID+":cancel" || string(req.body) != "{}" {
		t.Errorf("request = %s %s %s", req.method, req.path, req.body)
	}
	if _, err := c.CancelTask(context.Background(), testTaskID, "cancel:2", CancelTaskRequest{Reason: "no longer needed"}); err != nil {
		t.Fatal(err)
	}
	if body := (<-reqs).body; string(body) != `{"reason":"no longer needed"}` {
		t.Errorf("body = %s", body)
	}
}

func TestClientGetAndListTasks(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"items":[`+taskJSON+`],"next_cursor":"c2"}`))
	page, err := c.ListTasks(context.Background(), ListTasksRequest{QueueID: testQueueID, State: TaskStatePending, Limit: 1, Cursor: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	q, _ := url.ParseQuery(req.rawQuery)
	if req.method != http.MethodGet || req.path != "/v1/tasks" || len(q) != 4 ||
		q.Get("queue_id") != testQueueID || q.Get("state") != "PENDING" || q.Get("limit") != "1" || q.Get("cursor") != "c1" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	if req.header.Get("Idempotency-Key") != "" || req.header.Get("Content-Type") != "" || len(req.body) != 0 {
		t.Errorf("a read sent a key, a content type or a body: %v %q", req.header, req.body)
	}
	if len(page.Items) != 1 || page.NextCursor != "c2" || page.Items[0].State != TaskStatePending {
		t.Errorf("page = %+v", page)
	}

	if _, err := c.ListTasks(context.Background(), ListTasksRequest{QueueID: testQueueID}); err != nil {
		t.Fatal(err)
	}
	if q := (<-reqs).rawQuery; q != "queue_id="+testQueueID {
		t.Errorf("query = %q; want queue_id only", q)
	}
}

func TestClientGetTask(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(taskJSON))
	task, err := c.GetTask(context.Background(), testTaskID)
	if err != nil {
		t.Fatal(err)
	}
	if req := <-reqs; req.method != http.MethodGet || req.path != "/v1/tasks/"+testTaskID {
		t.Errorf("request = %s %s", req.method, req.path)
	}
	if task.ID != testTaskID || !task.Idempotent || task.MaxAttempts != 3 {
		t.Errorf("task = %+v", task)
	}
}

func TestClientDecodesErrorEnvelope(t *testing.T) {
	t.Parallel()
	c, _ := setupAPI(t, http.StatusConflict,
		`{"request_id":"`+testReqID+`","error":{"code":"IDEMPOTENCY_CONFLICT","message":"key used with other content"}}`)
	_, err := c.SubmitTask(context.Background(), "k", SubmitTaskRequest{QueueID: testQueueID})
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v; want an *APIError", err)
	}
	want := APIError{Status: 409, Code: CodeIdempotencyConflict, Message: "key used with other content", RequestID: testReqID}
	if *apiErr != want {
		t.Errorf("err = %+v, want %+v", *apiErr, want)
	}
	if !IsCode(err, CodeIdempotencyConflict) || IsCode(err, CodeStateConflict) || IsCode(nil, CodeIdempotencyConflict) {
		t.Error("IsCode answers wrongly")
	}
	if !strings.Contains(err.Error(), "IDEMPOTENCY_CONFLICT") || !strings.Contains(err.Error(), testReqID) {
		t.Errorf("message = %q", err.Error())
	}
}

func TestClientReportsNonEnvelopeAsAPIErrorWithoutCode(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, testToken, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetTask(context.Background(), testTaskID)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway || apiErr.Code != "" {
		t.Fatalf("err = %#v", err)
	}
	if IsCode(err, "") {
		t.Error(`IsCode(err, "") = true`)
	}
}

func TestClientWrapsTransportErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	c, err := NewClient(srv.URL, testToken, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	_, err = c.Credential(context.Background())
	var apiErr *APIError
	var urlErr *url.Error
	if err == nil || errors.As(err, &apiErr) || !errors.As(err, &urlErr) {
		t.Fatalf("err = %v; want a wrapped *url.Error and no *APIError", err)
	}
	if strings.Contains(err.Error(), testToken) {
		t.Error("the error contains the token")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Credential(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v; want context.Canceled", err)
	}
}

func TestClientCredentialUnderBasePath(t *testing.T) {
	t.Parallel()
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		_, _ = io.WriteString(w, dataBody(`{"id":"c1","namespace_id":"n1","namespace":"acme","application_id":"a1",
			"application":"shop","environment_id":"e1","environment":"prod","permissions":["tasks:read","tasks:work"],
			"queue_ids":["`+testQueueID+`"]}`))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL+"/orbit/", testToken, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Credential(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if path != "/orbit/v1/credential" {
		t.Errorf("path = %q", path)
	}
	if info.Namespace != "acme" || info.Environment != "prod" || len(info.Permissions) != 2 || info.QueueIDs[0] != testQueueID {
		t.Errorf("info = %+v", info)
	}
}

func TestNewClientRefusesCredentialsInURL(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ url, token string }{
		"UserInfo":     {"https://user:pass@orbit.example.com", testToken},
		"Query":        {"https://orbit.example.com/?access_token=x", testToken},
		"EmptyQuery":   {"https://orbit.example.com/?", testToken},
		"TokenInPath":  {"https://orbit.example.com/" + testToken, testToken},
		"Fragment":     {"https://orbit.example.com/#x", testToken},
		"NoScheme":     {"orbit.example.com", testToken},
		"OtherScheme":  {"ftp://orbit.example.com", testToken},
		"EmptyToken":   {"https://orbit.example.com", ""},
		"NotAURL":      {"https://[::1", testToken},
		"WebSocketURL": {"wss://orbit.example.com", testToken},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewClient(tc.url, tc.token)
			if err == nil {
				t.Fatal("NewClient accepted the URL")
			}
			if tc.token != "" && strings.Contains(err.Error(), tc.token) {
				t.Errorf("error %q repeats the token", err)
			}
		})
	}
	if _, err := NewClient("http://127.0.0.1:8080/", testToken); err != nil {
		t.Errorf("loopback URL refused: %v", err)
	}
}

func TestClientSubmitTasksSendsItemsAndDecodesResults(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"results":[
		{"idempotency_key":"k-1","status":201,"data":{"task":`+taskJSON+`,"deduplicated":false}},
		{"idempotency_key":"k-2","status":404,"error":{"code":"NOT_FOUND","message":"queue not found"}}]}`))
	res, err := c.SubmitTasks(context.Background(), []BatchTask{
		{IdempotencyKey: "k-1", SubmitTaskRequest: SubmitTaskRequest{QueueID: testQueueID, Input: json.RawMessage(`{"n":1}`), Idempotent: true}},
		{IdempotencyKey: "k-2", SubmitTaskRequest: SubmitTaskRequest{QueueID: testQueueID, Input: json.RawMessage(`{"n":2}`), MaxAttempts: 5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.method != http.MethodPost || req.path != "/v1/tasks:batch" || req.header.Get("Idempotency-Key") != "" {
		t.Errorf("request = %s %s, Idempotency-Key %q", req.method, req.path, req.header.Get("Idempotency-Key"))
	}
	var body struct {
		Tasks []map[string]json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(req.body, &body); err != nil || len(body.Tasks) != 2 {
		t.Fatalf("body = %s", req.body)
	}
	if string(body.Tasks[0]["idempotency_key"]) != `"k-1"` || string(body.Tasks[0]["input"]) != `{"n":1}` ||
		string(body.Tasks[1]["max_attempts"]) != "5" || len(body.Tasks[0]) != 4 {
		t.Errorf("items = %s; want each submission with its own idempotency_key", req.body)
	}
	if res[0].Status != 201 || res[0].Err != nil || res[0].Result == nil || res[0].Result.Task.ID != testTaskID ||
		res[0].Result.Task.Revision != 18446744073709551615 {
		t.Errorf("result 0 = %+v", res[0])
	}
	var apiErr *APIError
	if !errors.As(res[1].Err, &apiErr) || apiErr.Code != CodeNotFound || apiErr.Status != 404 || res[1].Result != nil {
		t.Errorf("result 1 = %+v, want its own NOT_FOUND", res[1])
	}
	if _, err := c.SubmitTasks(context.Background(), []BatchTask{{SubmitTaskRequest: SubmitTaskRequest{QueueID: testQueueID}}}); err == nil {
		t.Error("a task without a key was sent")
	}
}
