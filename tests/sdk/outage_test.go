package sdk_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// resumeBound is how soon after the database's return work must resume
// (F-2).
const resumeBound = 5 * time.Second

// outageLength is how long the database stays down: long enough for the
// SDK clients to fail many connection attempts in a row, so that a
// backoff without a small cap would likely keep them away for longer than
// resumeBound after the database's return.
const outageLength = 15 * time.Second

// entryProtocols are the sub-protocols of the WebSocket entries, the
// routes that take any method.
var entryProtocols = map[string]string{
	"/v1/events/connect":  "orbit.events.v1",
	"/v1/workers/connect": "orbit.workers.v1",
}

// TestF2_DatabaseOutageUnderRunningWorkerAndConsumer stops the database
// under a running SDK worker and a running SDK consumer, with two tasks in
// their handlers, and starts it again. While it is down, /healthz is 200
// and every other route of every module, the two WebSocket upgrades
// included, answers 503 UNAVAILABLE with Retry-After (C-7). Within 5 s of
// its return /readyz is 200 and a task submitted then has been worked and
// its result delivered, without restarting Orbit (F-2). Nothing is lost:
// every task succeeded once and every result was acknowledged once.
//
// It does not run in parallel with other tests, so that its time bound
// measures Orbit and not the machine's load.
func TestF2_DatabaseOutageUnderRunningWorkerAndConsumer(t *testing.T) {
	ctx := context.Background()
	dbServer := testdb.NewServer(t)
	pool, err := db.Open(ctx, dbServer.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	srv := servertest.StartOn(t, pool)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: append([]string{"tasks:work"}, allPermissions...)})
	client := newClient(t, srv, cred.Token)
	res, err := client.CreateSubscription(ctx, "outage:create", orbit.CreateSubscriptionRequest{
		Name: "outage", QueueID: cred.QueueID, Types: []string{orbit.EventTypeTaskSucceeded}, MaxPending: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	sub := res.Subscription

	// The clients run with the SDK's default backoff: its cap is what
	// brings them back in time.
	held := make(chan string, 2)
	release := make(chan struct{})
	startOutageWorker(t, orbit.WorkerConfig{BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Capacity: 4, Logger: testLogger(t)},
		func(ctx context.Context, task *orbit.AssignedTask) orbit.Outcome {
			if strings.Contains(string(task.Input), "hold") {
				held <- task.ID
				<-release
			}
			return orbit.Succeeded(task.Input)
		})
	handled := newTaskSet()
	startConsumer(t, orbit.EventConsumerConfig{BaseURL: srv.URL, Token: cred.Token, SubscriptionID: sub.ID, Capacity: 4, Logger: testLogger(t)},
		func(_ context.Context, d *orbit.Delivery) error {
			handled.add(d.Event.AggregateID)
			return nil
		})

	var submitted []string
	submit := func(name string) (string, error) {
		r, err := client.SubmitTask(ctx, "outage:"+name, orbit.SubmitTaskRequest{
			QueueID: cred.QueueID, Input: json.RawMessage(fmt.Sprintf(`{"name":%q}`, name)),
		})
		if err != nil {
			return "", err
		}
		submitted = append(submitted, r.Task.ID)
		return r.Task.ID, nil
	}
	for _, name := range []string{"before-1", "before-2", "hold-1", "hold-2"} {
		if _, err := submit(name); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-held:
		case <-time.After(waitTime):
			t.Fatal("the held tasks did not reach the worker")
		}
	}
	waitUntil(t, waitTime, "delivered before the outage", func() bool { return handled.len() >= 2 }, handled.String)

	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := dbServer.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	down := time.Now()

	t.Run("EveryPathIsUnavailable", func(t *testing.T) {
		checkOutageAnswers(t, srv, cred.Token)
	})
	// The handlers finish while the database is down: their outcomes
	// wait in the worker until it can report them.
	close(release)
	time.Sleep(time.Until(down.Add(outageLength)))

	restartCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := dbServer.Restart(restartCtx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	deadline := back.Add(resumeBound)

	ready := func() bool {
		r, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}
	for !ready() {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within %s of the database's return", resumeBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var after string
	for {
		if after, err = submit("after"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit within %s of the database's return: %v", resumeBound, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for !handled.has(after) {
		if time.Now().After(deadline) {
			t.Fatalf("the task submitted after the database's return was not worked and delivered within %s: delivered %s",
				resumeBound, handled)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("work resumed %s after the database's return", time.Since(back).Round(time.Millisecond))

	waitUntil(t, waitTime, "every result delivered", func() bool { return handled.len() == len(submitted) }, handled.String)
	waitUntil(t, waitTime, "every delivery acknowledged", func() bool { return countAcked(t, pool, sub.ID) == len(submitted) },
		func() string { return fmt.Sprint(deliveries(t, pool, sub.ID)) })
	checkSucceededOnce(t, pool, cred.QueueID, submitted)
	rows := deliveries(t, pool, sub.ID)
	if len(rows) != len(submitted) {
		t.Errorf("%d deliveries, want %d", len(rows), len(submitted))
	}
	for _, d := range rows {
		if d.state != "ACKED" || d.acks != 1 {
			t.Errorf("delivery of task %s: %s with %d ACK records, want ACKED with 1", d.taskID, d.state, d.acks)
		}
	}
}

// checkOutageAnswers checks what srv answers while its database is down:
// /healthz 200, every other route and both WebSocket upgrades 503
// UNAVAILABLE with Retry-After.
func checkOutageAnswers(t *testing.T, srv *servertest.Server, token string) {
	param := regexp.MustCompile(`\{[^}]+\}`)
	id := strings.Repeat("ab", 16)
	seen := map[string]bool{}
	for i, route := range srv.Routes {
		path := param.ReplaceAllString(route.Path, id)
		if len(route.Methods) == 0 {
			protocol, ok := entryProtocols[route.Path]
			if !ok {
				t.Errorf("route %s takes any method but is no known WebSocket entry", route.Path)
				continue
			}
			seen[route.Path] = true
			checkUpgradeUnavailable(t, srv, path, protocol, token)
			continue
		}
		if strings.HasPrefix(route.Path, "/console/") {
			checkConsoleOutage(t, srv, route, path)
			continue
		}
		for _, method := range route.Methods {
			h := http.Header{"Authorization": {"Bearer " + token}, "Idempotency-Key": {fmt.Sprintf("outage-%d", i)}}
			var body io.Reader
			if method == http.MethodPost {
				h.Set("Content-Type", "application/json")
				body = strings.NewReader(`{}`)
			}
			resp := doRaw(t, srv, method, path, h, body)
			if route.Path == "/healthz" {
				if resp.Status != http.StatusOK {
					t.Errorf("GET /healthz = %d %s, want 200 while the database is down", resp.Status, resp.Body)
				}
				continue
			}
			wantUnavailable(t, method+" "+route.Path, resp)
		}
	}
	for path := range entryProtocols {
		if !seen[path] {
			t.Errorf("the router has no WebSocket entry %s", path)
		}
	}
	if len(srv.Routes) < 10 {
		t.Errorf("only %d routes: %v", len(srv.Routes), srv.Routes)
	}
}

// checkUpgradeUnavailable opens a WebSocket connection to path and checks
// that the upgrade is refused with 503 UNAVAILABLE and Retry-After.
func checkUpgradeUnavailable(t *testing.T, srv *servertest.Server, path, protocol, token string) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{protocol}, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+path, http.Header{"Authorization": {"Bearer " + token}})
	if err == nil {
		ws.Close()
		t.Errorf("upgrade %s succeeded while the database is down", path)
		return
	}
	if resp == nil || !errors.Is(err, websocket.ErrBadHandshake) {
		t.Errorf("upgrade %s: %v, want a refusal", path, err)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := &servertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Errorf("upgrade %s: reply is not an envelope: %s", path, raw)
		return
	}
	wantUnavailable(t, "upgrade "+path, out)
}

// doRaw sends one request with exactly the headers h and decodes the
// envelope.
func doRaw(t *testing.T, srv *servertest.Server, method, path string, h http.Header, body io.Reader) *servertest.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := &servertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: reply is not an envelope: %s", method, path, raw)
	}
	return out
}

// consoleWithoutDatabase are the console's routes that answer without the
// database: the entry redirect, its assets and the sign-in form (whose POST
// is refused before the token is checked when it lacks its CSRF cookie).
var consoleWithoutDatabase = map[string]bool{
	"GET /console/": true, "GET /console/static/{file}": true, "GET /console/signin": true, "POST /console/signin": true,
}

// checkConsoleOutage asks for a console route with a well-formed session
// cookie while the database is down: the routes that need a session must
// answer 503 (an HTML page, with Retry-After), never 500; the others
// answer as usual, below 500.
func checkConsoleOutage(t *testing.T, srv *servertest.Server, route server.Route, path string) {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	for _, method := range route.Methods {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("csrf=x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "orbit_console="+strings.Repeat("ab", 16)+"."+strings.Repeat("cd", 32))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		what := method + " " + route.Path
		switch {
		case consoleWithoutDatabase[what]:
			if resp.StatusCode >= 500 {
				t.Errorf("%s = %d while the database is down, want its usual answer", what, resp.StatusCode)
			}
		case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1":
			t.Errorf("%s = %d (Retry-After %q), want 503 with Retry-After 1 while the database is down", what, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
}

// wantUnavailable checks that resp is 503 UNAVAILABLE with Retry-After.
func wantUnavailable(t *testing.T, what string, resp *servertest.Response) {
	t.Helper()
	if resp.Status != http.StatusServiceUnavailable || resp.Code() != "UNAVAILABLE" {
		t.Errorf("%s = %d %s, want 503 UNAVAILABLE while the database is down", what, resp.Status, resp.Body)
		return
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("%s: Retry-After = %q, want 1", what, got)
	}
}

// checkSucceededOnce checks in the database that every task of ids
// succeeded, with one completed attempt and one task.succeeded result, and
// that the queue holds no other task.
func checkSucceededOnce(t *testing.T, pool *sql.DB, queueID string, ids []string) {
	t.Helper()
	var tasks int
	if err := pool.QueryRow(`SELECT COUNT(*) FROM tasks WHERE queue_id = ?`, queueID).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	if tasks != len(ids) {
		t.Errorf("%d tasks in the queue, want %d", tasks, len(ids))
	}
	for _, id := range ids {
		var state string
		var completed, other, succeeded, results int
		err := pool.QueryRow(`SELECT state,
				(SELECT COUNT(*) FROM task_attempts WHERE task_id = t.id AND state = 'COMPLETED'),
				(SELECT COUNT(*) FROM task_attempts WHERE task_id = t.id AND state <> 'COMPLETED'),
				(SELECT COUNT(*) FROM result_events WHERE task_id = t.id AND type = 'task.succeeded'),
				(SELECT COUNT(*) FROM result_events WHERE task_id = t.id)
			FROM tasks t WHERE id = ?`, id).Scan(&state, &completed, &other, &succeeded, &results)
		if err != nil {
			t.Fatal(err)
		}
		if state != "SUCCEEDED" || completed != 1 || succeeded != 1 || results != 1 {
			t.Errorf("task %s: %s, %d completed and %d other attempts, %d task.succeeded of %d results; want SUCCEEDED once",
				id, state, completed, other, succeeded, results)
		}
	}
}

// startOutageWorker runs an SDK worker until the test ends, which fails
// if Run returned an error.
func startOutageWorker(t *testing.T, cfg orbit.WorkerConfig, h orbit.TaskHandler) {
	t.Helper()
	w, err := orbit.NewWorker(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker Run = %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("worker Run did not return")
		}
	})
}

// taskSet is the set of task IDs whose results a consumer handled.
type taskSet struct {
	mu  sync.Mutex
	ids map[string]int
}

func newTaskSet() *taskSet { return &taskSet{ids: map[string]int{}} }

func (s *taskSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[id]++
}

func (s *taskSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id] > 0
}

func (s *taskSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *taskSet) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.ids)
}
