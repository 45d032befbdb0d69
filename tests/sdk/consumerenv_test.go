package sdk_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// consumerPoll is the events.poll_interval of the consumer tests' servers.
const consumerPoll = 50 * time.Millisecond

// consumerEnv is a real server, a credential with allPermissions and one
// subscription to its queue's task.cancelled results.
type consumerEnv struct {
	srv    *servertest.Server
	cred   servertest.Credential
	client *orbit.Client
	sub    orbit.Subscription
}

// eventsSection changes the events section of a test server.
func eventsSection(change func(*events.Config)) servertest.Option {
	return servertest.ModuleConfig("events", change)
}

// subscriptionsSection changes the subscriptions section of a test server.
func subscriptionsSection(change func(*subscriptions.Config)) servertest.Option {
	return servertest.ModuleConfig("subscriptions", change)
}

// setupConsumer starts a server whose event connections poll every
// consumerPoll, with opts applied after that, and creates the
// subscription, with room for maxPending deliveries.
func setupConsumer(t *testing.T, maxPending int, opts ...servertest.Option) *consumerEnv {
	t.Helper()
	opts = append([]servertest.Option{eventsSection(func(c *events.Config) { c.PollInterval = consumerPoll })}, opts...)
	srv := servertest.Start(t, opts...)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: allPermissions})
	e := &consumerEnv{srv: srv, cred: cred, client: newClient(t, srv, cred.Token)}
	res, err := e.client.CreateSubscription(context.Background(), "consumer:create", orbit.CreateSubscriptionRequest{
		Name: "consumer", QueueID: cred.QueueID, Types: []string{orbit.EventTypeTaskCancelled}, MaxPending: maxPending,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.sub = res.Subscription
	return e
}

// config returns a consumer configuration for the subscription with quick
// reconnections and the test's log.
func (e *consumerEnv) config(t *testing.T, capacity int) orbit.EventConsumerConfig {
	return orbit.EventConsumerConfig{
		BaseURL: e.srv.URL, Token: e.cred.Token, SubscriptionID: e.sub.ID, Capacity: capacity,
		Backoff: orbit.BackoffConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  testLogger(t),
	}
}

// produce appends n task.cancelled results to the queue's log through the
// server's tasks store, which wakes the server's materialiser.
func (e *consumerEnv) produce(t *testing.T, n int) []string {
	t.Helper()
	store := e.srv.Instances["tasks"].(*tasks.Module).Store()
	return produceCancelled(t, store, e.cred.NamespaceID, e.cred.QueueID, e.cred.CredentialID, n)
}

// produceCancelled writes n tasks that are cancelled while PENDING, each
// appending one task.cancelled result, directly with the tasks store in
// transactions of up to 100 tasks, each announced by the store after its
// commit. It returns the task IDs.
func produceCancelled(t *testing.T, store *tasks.Store, namespaceID, queueID, credentialID string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for len(ids) < n {
		batch := min(100, n-len(ids))
		var made []string
		err := store.Tx(ctx, func(tx *sql.Tx) error {
			made = made[:0]
			for i := range batch {
				task, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: namespaceID, QueueID: queueID, CredentialID: credentialID,
					Input: fmt.Appendf(nil, `{"i":%d}`, len(ids)+i), MaxAttempts: tasks.DefaultMaxAttempts,
				})
				if err != nil {
					return err
				}
				if _, _, err := tasks.TaskCancel(ctx, tx, task.ID, "produced by a test"); err != nil {
					return err
				}
				made = append(made, task.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, made...)
	}
	return ids
}

// deliveryRow is a delivery as the database holds it.
type deliveryRow struct {
	id, eventID, taskID, state string
	epoch                      uint64
	acks                       int // rows in delivery_acks
}

// deliveries returns every delivery of the subscription, by delivery ID.
func deliveries(t *testing.T, pool *sql.DB, subscriptionID string) map[string]deliveryRow {
	t.Helper()
	rows, err := pool.QueryContext(context.Background(), `SELECT d.id, d.event_id, e.task_id, d.state, d.lease_epoch,
			(SELECT COUNT(*) FROM delivery_acks a WHERE a.delivery_id = d.id)
		FROM event_deliveries d JOIN result_events e ON e.queue_id = d.queue_id AND e.id = d.event_id
		WHERE d.subscription_id = ?`, subscriptionID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]deliveryRow{}
	for rows.Next() {
		var d deliveryRow
		if err := rows.Scan(&d.id, &d.eventID, &d.taskID, &d.state, &d.epoch, &d.acks); err != nil {
			t.Fatal(err)
		}
		out[d.id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countAcked returns how many deliveries of the subscription are ACKED.
func countAcked(t *testing.T, pool *sql.DB, subscriptionID string) int {
	t.Helper()
	var n int
	err := pool.QueryRowContext(context.Background(),
		`SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED'`, subscriptionID).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitUntil polls cond every 50 ms until it holds and fails the test after
// timeout; describe says what was seen last.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s still not %s: %s", timeout, what, describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningConsumer is an EventConsumer whose Run executes in the background.
type runningConsumer struct {
	c      *orbit.EventConsumer
	cancel context.CancelFunc
	done   chan struct{}
	err    error // what Run returned; set before done is closed
}

// startConsumer runs a consumer with cfg and handler until stop or the end
// of the test, which fails if Run returned an error.
func startConsumer(t *testing.T, cfg orbit.EventConsumerConfig, handler orbit.EventHandler) *runningConsumer {
	t.Helper()
	c, err := orbit.NewEventConsumer(cfg, handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rc.done)
		rc.err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		if err := rc.stop(t); err != nil {
			t.Errorf("consumer Run = %v", err)
		}
	})
	return rc
}

// stop cancels Run's context and returns what Run returned; it fails the
// test if Run takes longer than a minute.
func (rc *runningConsumer) stop(t *testing.T) error {
	t.Helper()
	rc.cancel()
	select {
	case <-rc.done:
	case <-time.After(time.Minute):
		t.Fatal("consumer Run did not return")
	}
	return rc.err
}

// testLogger returns a logger whose output is shown only when the test
// fails.
func testLogger(t *testing.T) *slog.Logger {
	buf := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lockedBuffer is a buffer for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
