//go:build linux

package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// TestE16_ServerKilledConsumerRecovers runs the orbit binary, kills it with
// SIGKILL while a consumer holds leased deliveries whose handlers have not
// returned yet, and starts it again on the same port and database. The
// consumer reconnects and sends its proofs again; leases the dead server
// left behind run out and are delivered again. Every one of 200 events
// ends ACKED with exactly one audit record, none is lost (E-16, E-17).
func TestE16_ServerKilledConsumerRecovers(t *testing.T) {
	t.Parallel()
	const (
		total    = 200
		capacity = 4
	)
	dir := t.TempDir()
	bin := orbitproc.Build(t, dir, raceDetector)
	dsn := testdb.NewDSN(t)
	pool, err := db.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	store := admin.NewStore(pool)
	sc, err := store.ScopeEnsure(context.Background(), &admin.ScopeEnsureParams{Namespace: "ns", Application: "app", Environment: "env", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	cred, token, err := store.CredentialCreate(context.Background(), &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Permissions: allPermissions, Queues: []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}

	serve := orbitproc.Serve{Bin: bin, Dir: dir, Addr: orbitproc.FreeAddr(t), DSN: dsn, Env: []string{
		"ORBIT_EVENTS_LEASE_DURATION=2s",
		"ORBIT_EVENTS_POLL_INTERVAL=100ms",
		"ORBIT_SUBSCRIPTIONS_RECOVER_INTERVAL=200ms",
		"ORBIT_SUBSCRIPTIONS_MATERIALIZE_INTERVAL=100ms",
	}}
	first := orbitproc.Start(t, serve)
	baseURL := "http://" + serve.Addr
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	client, err := orbit.NewClient(baseURL, token, orbit.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	created, err := client.CreateSubscription(context.Background(), "crash:create", orbit.CreateSubscriptionRequest{
		Name: "crash", QueueID: sc.QueueID, Types: []string{orbit.EventTypeTaskCancelled}, MaxPending: total,
	})
	if err != nil {
		t.Fatal(err)
	}
	subID := created.Subscription.ID

	// The first capacity handler calls hold their deliveries until the
	// server is dead; the rest return at once.
	handled := newHandledLog()
	var calls atomic.Int32
	holding := make(chan struct{}, capacity)
	release := make(chan struct{})
	rc := startConsumer(t, orbit.EventConsumerConfig{
		BaseURL: baseURL, Token: token, SubscriptionID: subID, Capacity: capacity,
		Backoff: orbit.BackoffConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		Logger:  testLogger(t),
	}, func(_ context.Context, d *orbit.Delivery) error {
		handled.add(d)
		if calls.Add(1) <= capacity {
			holding <- struct{}{}
			<-release
		}
		return nil
	})
	// This process runs no server: nobody waits for the store's signals.
	log := tasks.NewStore(pool, admin.NewStore(pool), time.Second, time.Minute)
	tasks := produceCancelled(t, log, sc.NamespaceID, sc.QueueID, cred.ID, total)
	for range capacity {
		select {
		case <-holding:
		case <-time.After(time.Minute):
			t.Fatal("the consumer did not receive its first deliveries")
		}
	}
	var leased int
	if err := pool.QueryRow(`SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'LEASED'`, subID).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != capacity {
		t.Fatalf("%d deliveries LEASED before the kill, want %d", leased, capacity)
	}

	first.Kill(t)
	close(release) // the held events are stored now, but no server hears their ACKs
	orbitproc.Start(t, serve)

	waitUntil(t, 2*time.Minute, "every delivery ACKED", func() bool { return countAcked(t, pool, subID) == total },
		func() string {
			return fmt.Sprintf("%d of %d ACKED; consumer %+v", countAcked(t, pool, subID), total, rc.c.Stats())
		})
	if err := rc.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	rows := deliveries(t, pool, subID)
	checkAckedOnce(t, rows, total)
	handled.check(t, rows)
	byTask := map[string]bool{}
	for _, d := range rows {
		byTask[d.taskID] = true
	}
	for _, id := range tasks {
		if !byTask[id] {
			t.Errorf("the result of task %s was never delivered", id)
		}
	}
	st := rc.c.Stats()
	if st.Reconnects < 1 {
		t.Errorf("stats = %+v; want a reconnection", st)
	}
	t.Logf("consumer stats after the kill: %+v", st)
}
