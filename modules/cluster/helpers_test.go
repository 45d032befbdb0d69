package cluster_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/cluster"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/workers"
)

const (
	// bound limits every wait for something that is due; it only turns a
	// hang into a failure.
	bound = 10 * time.Second
	// heartbeat is the cluster.heartbeat_interval of the test nodes.
	heartbeat = 100 * time.Millisecond
	// never is a poll interval that no test outlives: what arrives came
	// through a signal.
	never = time.Hour
	// closeServiceRestart is the close code of a connection whose session
	// the cluster closed.
	closeServiceRestart = 1012
)

// permissions let a credential work tasks, submit and cancel them, and
// manage and consume subscriptions.
var permissions = []string{
	auth.PermTasksWork, auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel,
	auth.PermEventsManage, auth.PermEventsRead, auth.PermEventsConsume,
}

// fastHeartbeat makes the node beat every heartbeat.
func fastHeartbeat() servertest.Option {
	return servertest.ModuleConfig("cluster", func(c *cluster.Config) { c.HeartbeatInterval = heartbeat })
}

// polls sets the poll intervals of worker and event connections and of the
// materialiser to d.
func polls(d time.Duration) servertest.Option {
	return func(cfg *config.Config, in modules.Instances) {
		servertest.ModuleConfig("workers", func(c *workers.Config) { c.PollInterval = d })(cfg, in)
		servertest.ModuleConfig("events", func(c *events.Config) { c.PollInterval = d })(cfg, in)
		servertest.ModuleConfig("subscriptions", func(c *subscriptions.Config) { c.MaterializeInterval = d })(cfg, in)
	}
}

// nodes starts n servers on one fresh database with opts, and waits until
// each sees the others.
func nodes(t *testing.T, pool *sql.DB, n int, opts ...servertest.Option) []*servertest.Server {
	t.Helper()
	opts = append([]servertest.Option{fastHeartbeat()}, opts...)
	var out []*servertest.Server
	for range n {
		out = append(out, servertest.StartOn(t, pool, opts...))
	}
	for _, s := range out {
		eventually(t, "every node sees the others", func() bool { return node(s).Peers() == n-1 })
	}
	return out
}

// node returns the cluster module of a server.
func node(s *servertest.Server) *cluster.Module { return s.Instances["cluster"].(*cluster.Module) }

// eventually polls cond until it holds, and fails the test after bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", bound, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// credential makes a credential with permissions on a queue of its own.
func credential(t *testing.T, s *servertest.Server) servertest.Credential {
	t.Helper()
	return s.Credential(t, servertest.CredentialParams{Queue: "q-" + strings.ToLower(rand.Text())[:12], Permissions: permissions})
}

// wsURL returns the WebSocket URL of an entry of s.
func wsURL(s *servertest.Server, path string) string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + path
}

// worker connects a worker of cred to s with capacity 1.
func worker(t *testing.T, s *servertest.Server, cred servertest.Credential) *wstest.Client {
	t.Helper()
	c := wstest.Dial(t, wstest.Options{URL: wsURL(s, "/v1/workers/connect"), Subprotocol: "orbit.workers.v1", Token: cred.Token, Timeout: bound})
	return welcome(t, c, "worker.hello", map[string]any{"queue_id": cred.QueueID, "capacity": 1, "worker_name": "w"})
}

// consumer connects a consumer of the subscription to s with capacity 4.
func consumer(t *testing.T, s *servertest.Server, cred servertest.Credential, subscriptionID string) *wstest.Client {
	t.Helper()
	c := wstest.Dial(t, wstest.Options{URL: wsURL(s, "/v1/events/connect"), Subprotocol: "orbit.events.v1", Token: cred.Token, Timeout: bound})
	return welcome(t, c, "events.hello", map[string]any{"subscription_id": subscriptionID, "capacity": 4})
}

// welcome sends the hello and binds the session of its welcome.
func welcome(t *testing.T, c *wstest.Client, typ string, body any) *wstest.Client {
	t.Helper()
	reply := c.Request(typ, body)
	var w struct {
		SessionID string `json:"session_id"`
	}
	if reply.Type == "error" || reply.DecodeBody(&w) != nil || w.SessionID == "" {
		t.Fatalf("answer to %s: %s", typ, reply)
	}
	c.SetSession(w.SessionID)
	return c
}

// do sends an HTTP request to s and fails the test unless it is answered
// with status; it returns the envelope's data.
func do(t *testing.T, s *servertest.Server, cred servertest.Credential, method, path, body string, status int) json.RawMessage {
	t.Helper()
	r := s.Do(t, servertest.Request{Method: method, Path: path, Token: cred.Token, IdempotencyKey: "key-" + rand.Text(), Body: body})
	if r.Status != status {
		t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
	}
	return r.Data
}

// subscribe creates a subscription on cred's queue through s.
func subscribe(t *testing.T, s *servertest.Server, cred servertest.Credential) string {
	t.Helper()
	data := do(t, s, cred, http.MethodPost, "/v1/subscriptions",
		fmt.Sprintf(`{"name":"s-%s","queue_id":%q}`, strings.ToLower(rand.Text())[:12], cred.QueueID), http.StatusCreated)
	var receipt struct {
		Subscription struct {
			ID string `json:"id"`
		} `json:"subscription"`
	}
	if err := json.Unmarshal(data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Subscription.ID
}

// submit submits a task on cred's queue through s and returns its id.
func submit(t *testing.T, s *servertest.Server, cred servertest.Credential) string {
	t.Helper()
	data := do(t, s, cred, http.MethodPost, "/v1/tasks", fmt.Sprintf(`{"queue_id":%q,"input":{}}`, cred.QueueID), http.StatusCreated)
	var receipt struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Task.ID
}

// cancel requests the cancel of a task through s.
func cancel(t *testing.T, s *servertest.Server, cred servertest.Credential, taskID string) {
	t.Helper()
	do(t, s, cred, http.MethodPost, "/v1/tasks/"+taskID+":cancel", `{}`, http.StatusOK)
}

// openSessions counts the open worker and event sessions of a node.
func openSessions(t *testing.T, pool *sql.DB, nodeID string) int {
	t.Helper()
	var n int
	err := pool.QueryRowContext(context.Background(), `SELECT
		(SELECT COUNT(*) FROM worker_sessions WHERE node_id = ? AND closed_at IS NULL) +
		(SELECT COUNT(*) FROM event_sessions WHERE node_id = ? AND closed_at IS NULL)`, nodeID, nodeID).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeRow is what a test reads of a node's row.
type nodeRow struct {
	name             string
	pid              int
	heartbeatAt      time.Time
	stopped, dead    bool
	heartbeatMS      int
	startedBeforeNow bool
}

func readNode(t *testing.T, pool *sql.DB, id string) (nodeRow, bool) {
	t.Helper()
	var r nodeRow
	err := pool.QueryRowContext(context.Background(), `SELECT name, pid, heartbeat_at, stopped_at IS NOT NULL, dead_at IS NOT NULL,
		heartbeat_ms, started_at <= UTC_TIMESTAMP(6) FROM nodes WHERE id = ?`, id).
		Scan(&r.name, &r.pid, &r.heartbeatAt, &r.stopped, &r.dead, &r.heartbeatMS, &r.startedBeforeNow)
	if err == sql.ErrNoRows {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}
