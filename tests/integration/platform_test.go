package integration_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
	_ "github.com/orbitrun/orbit/modules/all"
	"github.com/orbitrun/orbit/modules/events"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The platform side of the receiver tests: an in-process Orbit server, as
// internal/testkit/servertest runs one, but on the shared orbit_test
// database of TestMain rather than on a database of its own. Each
// test starts its own server and bootstraps its own namespace and queue, so
// tests and servers share the database the way nodes of one deployment do.

// platformStopTimeout bounds stopping an in-process server.
const platformStopTimeout = 10 * time.Second

// platform is a running in-process Orbit server on orbit_test.
type platform struct {
	URL  string
	logs *syncBuffer
}

// platformOption changes a module's settings, or wraps the server's
// handler, before the server starts.
type platformOption func(in modules.Instances, wrap *func(http.Handler) http.Handler)

// withEventLease sets events.lease_duration (30 s by default).
func withEventLease(d time.Duration) platformOption {
	return func(in modules.Instances, _ *func(http.Handler) http.Handler) {
		in["events"].(*events.Module).Config().(*events.Config).LeaseDuration = d
	}
}

// withMiddleware puts mw in front of the server's handler.
func withMiddleware(mw func(http.Handler) http.Handler) platformOption {
	return func(_ modules.Instances, wrap *func(http.Handler) http.Handler) { *wrap = mw }
}

// startPlatform runs every server module on orbit_test behind an httptest
// server on a loopback port until the test ends. The server's log is
// printed if the test fails.
func startPlatform(t *testing.T, opts ...platformOption) *platform {
	t.Helper()
	cfg := config.Default()
	in := modules.NewInstances()
	wrap := func(h http.Handler) http.Handler { return h }
	for _, o := range opts {
		o(in, &wrap)
	}
	if err := in.Validate(); err != nil {
		t.Fatalf("platform: module config: %v", err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	srv, err := server.New(ctx, server.Params{Config: cfg, DB: env.platform, Logger: logger, Instances: in})
	if err != nil {
		t.Fatalf("platform: %v", err)
	}
	if err := srv.StartModules(ctx); err != nil {
		t.Fatalf("platform: start modules: %v", err)
	}
	hs := httptest.NewServer(wrap(srv.Handler()))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), platformStopTimeout)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Errorf("platform: stop: %v", err)
		}
		// The SDK's management calls use the shared client; its
		// keep-alive connections end with this server.
		http.DefaultClient.CloseIdleConnections()
		if t.Failed() {
			t.Logf("platform log:\n%s", logs)
		}
	})
	return &platform{URL: hs.URL, logs: logs}
}

// credential is a credential made as `orbit admin bootstrap --event-access`
// makes it: its file on disk and the file loaded.
type credential struct {
	Path string
	*orbit.Credentials
	client *orbit.Client
}

// bootstrap creates a namespace of the test's own, with the application,
// environment and queue names of seed 000 §1, and a credential with the
// --event-access permissions (tasks:submit, tasks:read, tasks:cancel,
// events:read, events:consume, events:manage), written to a credentials
// file in a private directory.
func (p *platform) bootstrap(t *testing.T, queue string) *credential {
	t.Helper()
	dir := filepath.Join(t.TempDir(), ".local")
	if err := os.Mkdir(dir, 0o700); err != nil { // bootstrap refuses a directory others can read
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inbox.credentials.json")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	file, err := admin.Bootstrap(ctx, admin.NewStore(env.platform), &admin.BootstrapParams{
		Namespace: "it-" + db.NewID()[:12], Application: "inbox-example", Environment: "development",
		Queue: queue, EventAccess: true, URL: p.URL, Output: path,
	})
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	creds, err := orbit.LoadCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	// The file's own values, whatever ORBIT_URL, ORBIT_TOKEN or
	// ORBIT_QUEUE_ID the developer's environment holds.
	creds.URL, creds.Token, creds.QueueID = file.URL, file.Token, file.QueueID
	client, err := creds.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	return &credential{Path: path, Credentials: creds, client: client}
}

// subscribe creates a subscription on the credential's queue to types (nil:
// all four) with the given attempt budget (0: the server's default).
func (c *credential) subscribe(t *testing.T, ctx context.Context, types []string, maxAttempts int) *orbit.Subscription {
	t.Helper()
	id := db.NewID()
	res, err := c.client.CreateSubscription(ctx, "it:create:"+id, orbit.CreateSubscriptionRequest{
		Name: "it-" + id[:12], QueueID: c.QueueID, Types: types, MaxAttempts: maxAttempts,
	})
	if err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	return &res.Subscription
}

// cancelledTask submits a task to the credential's queue and cancels it
// while it waits; its task.cancelled event is the next on the queue's log.
// It returns the task id.
func (c *credential) cancelledTask(t *testing.T, ctx context.Context) string {
	t.Helper()
	id, err := c.cancelledTaskErr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// cancelledTaskErr is cancelledTask for callers outside the test's
// goroutine: it returns errors instead of failing the test.
func (c *credential) cancelledTaskErr(ctx context.Context) (string, error) {
	id, err := c.submitErr(ctx)
	if err != nil {
		return "", err
	}
	return id, c.cancelErr(ctx, id)
}

// submit submits a task to the credential's queue and returns its id.
func (c *credential) submit(t *testing.T, ctx context.Context) string {
	t.Helper()
	id, err := c.submitErr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// cancel cancels a waiting task.
func (c *credential) cancel(t *testing.T, ctx context.Context, taskID string) {
	t.Helper()
	if err := c.cancelErr(ctx, taskID); err != nil {
		t.Fatal(err)
	}
}

func (c *credential) submitErr(ctx context.Context) (string, error) {
	submitted, err := c.client.SubmitTask(ctx, "it:submit:"+db.NewID(), orbit.SubmitTaskRequest{
		QueueID: c.QueueID, Input: []byte(`{"order":"it"}`),
	})
	if err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	return submitted.Task.ID, nil
}

func (c *credential) cancelErr(ctx context.Context, taskID string) error {
	if _, err := c.client.CancelTask(ctx, taskID, "it:cancel:"+db.NewID(), orbit.CancelTaskRequest{Reason: "integration"}); err != nil {
		return fmt.Errorf("cancel %s: %w", taskID, err)
	}
	return nil
}

// delivery is a row of event_deliveries with what the tests look at.
type delivery struct {
	ID, EventID, State string
	Attempts, Budget   int
	Epoch              uint64
	AckEpoch           sql.NullInt64 // delivery_acks.epoch, when acknowledged
}

// deliveries returns the deliveries of a subscription by the task their
// event reports.
func deliveries(t *testing.T, ctx context.Context, subscriptionID string) map[string]delivery {
	t.Helper()
	rows, err := env.platform.QueryContext(ctx, `SELECT e.task_id, d.id, d.event_id, d.state, d.attempts, d.attempt_budget,
			d.lease_epoch, a.epoch
		FROM event_deliveries d
		JOIN result_events e ON e.queue_id = d.queue_id AND e.id = d.event_id
		LEFT JOIN delivery_acks a ON a.delivery_id = d.id
		WHERE d.subscription_id = ?`, subscriptionID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]delivery{}
	for rows.Next() {
		var task string
		var d delivery
		if err := rows.Scan(&task, &d.ID, &d.EventID, &d.State, &d.Attempts, &d.Budget, &d.Epoch, &d.AckEpoch); err != nil {
			t.Fatal(err)
		}
		out[task] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deliveryOf waits until the task's event has a delivery for which ok
// holds and returns it.
func deliveryOf(t *testing.T, ctx context.Context, subscriptionID, taskID, what string, ok func(delivery) bool) delivery {
	t.Helper()
	var d delivery
	waitUntil(t, ctx, "delivery of task "+taskID+": "+what, func() bool {
		var found bool
		d, found = deliveries(t, ctx, subscriptionID)[taskID]
		return found && ok(d)
	})
	return d
}

// pollInterval is how often waitUntil looks again.
const pollInterval = 50 * time.Millisecond

// waitUntil polls cond until it holds; it fails the test when ctx ends
// first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// receiverAccount creates a MySQL account that holds only SELECT, INSERT
// and UPDATE on the receiver's Inbox and view in orbit_receiver_test, as
// R-2 says a running receiver needs, and SELECT, INSERT, UPDATE and DELETE
// on its ACK intents (K-13: an answered intent is deleted); it returns
// the account's DSN and user name. The account is dropped when the test
// ends.
func receiverAccount(t *testing.T, ctx context.Context) (dsn, user string) {
	t.Helper()
	user = "it_" + db.NewID()[:12]
	password := db.NewID()
	stmts := []string{fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password)}
	for _, table := range receiverTables {
		privileges := "SELECT, INSERT, UPDATE"
		if table == intentsTable {
			privileges += ", DELETE"
		}
		stmts = append(stmts, fmt.Sprintf("GRANT %s ON `%s`.`%s` TO '%s'@'%%'", privileges, receiverDatabase, table, user))
	}
	for _, stmt := range stmts {
		if _, err := env.receiver.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("receiver account (the test server's user needs CREATE USER and GRANT OPTION): %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := env.receiver.ExecContext(ctx, fmt.Sprintf("DROP USER '%s'@'%%'", user)); err != nil {
			t.Errorf("drop receiver account: %v", err)
		}
	})
	cfg, err := mysql.ParseDSN(env.receiverDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN(), user
}

// emptyDatabase creates a database with no table on the test server and
// returns its DSN; it is dropped when the test ends.
func emptyDatabase(t *testing.T, ctx context.Context) (dsn, name string) {
	t.Helper()
	name = "orbit_receiver_empty_" + db.NewID()[:12]
	if _, err := env.receiver.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := env.receiver.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	cfg, err := mysql.ParseDSN(env.receiverDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), name
}

// viewOf returns applied_events and last_state of a consumer's view row of
// a task, and whether the row exists.
func viewOf(t *testing.T, ctx context.Context, consumer, queueID, taskID string) (applied int, state string, found bool) {
	t.Helper()
	err := env.receiver.QueryRowContext(ctx, `SELECT applied_events, last_state FROM receiver_task_views
		WHERE consumer_name = ? AND queue_id = ? AND task_id = ?`, consumer, queueID, taskID).Scan(&applied, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return applied, state, true
}

// inboxApplied returns whether the consumer's Inbox holds the event, and
// its applied flag.
func inboxApplied(t *testing.T, ctx context.Context, consumer, queueID, eventID string) (applied, found bool) {
	t.Helper()
	err := env.receiver.QueryRowContext(ctx, `SELECT applied FROM receiver_inbox
		WHERE consumer_name = ? AND queue_id = ? AND event_id = ?`, consumer, queueID, eventID).Scan(&applied)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return applied, true
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
