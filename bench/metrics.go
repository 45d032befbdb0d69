package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Settings of the metrics collector row (O-3).
const (
	metricsQueues        = 16
	metricsSubscriptions = 64
	metricsResults       = 200 // results per queue, more than a subscription's backlog holds
	metricsPending       = 50  // PENDING tasks per queue
	metricsRefreshes     = 20
	// scrapeInterval is how often the bench scrapes GET /metrics during
	// every row, as a Prometheus server would.
	scrapeInterval = 10 * time.Second
)

// metricsResult is the cost of one refresh of the database-backed gauges
// with metricsQueues queues and metricsSubscriptions subscriptions.
type metricsResult struct {
	Queues, Subscriptions int // what the refresh covered, the other rows' included
	Queries               int64
	P50, Max              time.Duration
	Deliveries            int
}

func (m *metricsResult) summary() string {
	return fmt.Sprintf("metrics refresh: %d queues, %d subscriptions, %d deliveries: %d queries, %s per refresh (p50; max %s)",
		m.Queues, m.Subscriptions, m.Deliveries, m.Queries, ms(m.P50), ms(m.Max))
}

// runMetrics creates metricsQueues queues in a namespace of their own,
// metricsSubscriptions subscriptions spread over them, metricsResults
// results and metricsPending PENDING tasks per queue, waits for the
// backlogs to be materialised, then times metricsRefreshes refreshes.
func runMetrics(ctx context.Context, e *env) (*metricsResult, error) {
	store := admin.NewStore(e.pool)
	var queues []string
	var sc admin.Scope
	for i := range metricsQueues {
		var err error
		sc, err = store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{
			Namespace: "bench-metrics", Application: "bench", Environment: "bench", Queue: fmt.Sprintf("m-%02d", i),
		})
		if err != nil {
			return nil, fmt.Errorf("metrics: scope: %w", err)
		}
		queues = append(queues, sc.QueueID)
	}
	cred, token, err := store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "bench-metrics", Permissions: auth.AllPermissions, Queues: queues,
	})
	if err != nil {
		return nil, fmt.Errorf("metrics: credential: %w", err)
	}
	client, err := orbit.NewClient(e.url, token)
	if err != nil {
		return nil, err
	}
	from := uint64(0)
	for i := range metricsSubscriptions {
		if _, err := client.CreateSubscription(ctx, fmt.Sprintf("bench-metrics-%d", i), orbit.CreateSubscriptionRequest{
			Name: fmt.Sprintf("m-%02d", i), QueueID: queues[i%metricsQueues], FromSequence: &from,
		}); err != nil {
			return nil, fmt.Errorf("metrics: subscription: %w", err)
		}
	}
	for _, q := range queues {
		err := db.Tx(ctx, e.pool, func(tx *sql.Tx) error {
			for i := range metricsResults + metricsPending {
				t, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: sc.NamespaceID, QueueID: q, CredentialID: cred.ID, Input: []byte(`{}`), MaxAttempts: 1,
				})
				if err != nil {
					return err
				}
				if i < metricsResults {
					if _, _, err := tasks.TaskCancel(ctx, tx, t.ID, "bench metrics"); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("metrics: tasks: %w", err)
		}
	}
	// Each subscription's backlog fills up to its max_pending (100).
	res := &metricsResult{}
	want := metricsSubscriptions * 100
	deadline := time.Now().Add(time.Minute)
	for res.Deliveries < want && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_deliveries d JOIN subscriptions s ON s.id = d.subscription_id
			WHERE s.namespace_id = ?`, sc.NamespaceID).Scan(&res.Deliveries); err != nil {
			return nil, err
		}
	}
	var took []time.Duration
	for range metricsRefreshes {
		cost, err := e.srv.RefreshMetrics(ctx)
		if err != nil {
			return nil, err
		}
		took = append(took, cost.Duration)
		res.Queries = cost.Queries
	}
	slices.Sort(took)
	res.P50, res.Max = took[len(took)/2], took[len(took)-1]
	families, err := e.srv.Metrics().Gatherer().Gather()
	if err != nil {
		return nil, err
	}
	for _, f := range families {
		switch f.GetName() {
		case "orbit_result_log_head_sequence":
			res.Queues = len(f.GetMetric())
		case "orbit_subscription_lag":
			res.Subscriptions = len(f.GetMetric())
		}
	}
	return res, nil
}

// startScraper serves the server's metrics on a loopback port and scrapes
// them every scrapeInterval until ctx ends, as Prometheus would: the rows
// run with metrics on.
func (e *env) startScraper(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.srv.ServeMetrics(ln)
	url := "http://" + ln.Addr().String() + "/metrics"
	go func() {
		ticker := time.NewTicker(scrapeInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				if resp, err := http.Get(url); err == nil {
					resp.Body.Close()
				}
			}
		}
	}()
	return nil
}
