package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// o2Families are the metric families O-2 names, each checked in a scrape.
var o2Families = []string{
	"orbit_tasks", "orbit_tasks_submitted_total", "orbit_task_results_total", "orbit_task_lease_expiries_total",
	"orbit_task_oldest_pending_age_seconds", "orbit_result_log_head_sequence", "orbit_result_log_retained_events",
	"orbit_subscription_lag", "orbit_subscription_oldest_pending_age_seconds", "orbit_deliveries", "orbit_dead_letters",
	"orbit_subscription_blocked", "orbit_deliveries_total", "orbit_delivery_ack_seconds", "orbit_result_delivery_seconds",
	"orbit_ws_connections", "orbit_ws_refused_total", "orbit_claim_pool_waiting", "orbit_claim_seconds",
	"orbit_http_requests_total", "orbit_http_request_seconds", "orbit_db_transactions_total", "orbit_db_pool_in_use", "orbit_db_active_dsn",
	"orbit_db_pool_wait_seconds_total", "orbit_metrics_refresh_queries", "orbit_metrics_refresh_seconds",
	"go_goroutines", "process_cpu_seconds_total",
}

// scrape is one parsed GET /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, srv *servertest.Server) scrape {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(srv.Scrape(t)))
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// value returns the value of the series of family whose labels include
// labels (name=value pairs), summed over the matching series; histograms
// give their sample count.
func (s scrape) value(family string, labels ...string) float64 {
	f := s[family]
	if f == nil {
		return -1
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

// TestO2_WorkloadMetrics runs a workload against a real server (tasks
// submitted over HTTP, worked by the SDK worker and by a worker that
// disappears, results consumed by an SDK consumer that ACKs, one whose
// handler always fails (NACKs), one that takes its deliveries and goes
// away, and none at all) and checks in real scrapes that
// every O-2 family is there with the values the workload implies.
func TestO2_WorkloadMetrics(t *testing.T) {
	t.Parallel()
	const n = 5
	srv := servertest.Start(t,
		eventsSection(func(c *events.Config) { c.PollInterval = consumerPoll; c.LeaseDuration = 400 * time.Millisecond }),
		subscriptionsSection(func(c *subscriptions.Config) {
			c.RecoverInterval, c.NoConsumerAfter = 50*time.Millisecond, 200*time.Millisecond
		}),
		servertest.ModuleConfig("workers", func(c *workers.Config) {
			c.LeaseDuration, c.HeartbeatInterval = 500*time.Millisecond, 200*time.Millisecond
		}),
		servertest.ModuleConfig("tasks", func(c *tasks.Config) { c.SweepInterval = 50 * time.Millisecond }),
	)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: append([]string{"tasks:work"}, allPermissions...)})
	client := newClient(t, srv, cred.Token)
	ctx := context.Background()
	subs := map[string]string{}
	for name, maxAttempts := range map[string]int{"acked": 0, "dead": 1, "nacked": 1, "idle": 0} {
		res, err := client.CreateSubscription(ctx, "create:"+name, orbit.CreateSubscriptionRequest{
			Name: name, QueueID: cred.QueueID, MaxAttempts: maxAttempts,
		})
		if err != nil {
			t.Fatal(err)
		}
		subs[name] = res.Subscription.ID
	}

	// n tasks succeed through the SDK worker.
	workerCtx, stopWorker := context.WithCancel(ctx)
	worker, err := orbit.NewWorker(orbit.WorkerConfig{BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Logger: testLogger(t)},
		func(context.Context, *orbit.AssignedTask) orbit.Outcome {
			return orbit.Succeeded([]byte(`{"ok":true}`))
		})
	if err != nil {
		t.Fatal(err)
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()
	var ids []string
	for i := range n {
		res, err := client.SubmitTask(ctx, fmt.Sprintf("task-%d", i), orbit.SubmitTaskRequest{QueueID: cred.QueueID, Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	for _, id := range ids {
		waitUntil(t, waitTime, "succeeded", func() bool {
			task, err := client.GetTask(ctx, id)
			return err == nil && task.State == "SUCCEEDED"
		}, func() string { return id })
	}
	stopWorker()
	if err := <-workerDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("worker Run = %v", err)
	}

	// One more task is leased by a worker that goes away: its lease runs
	// out and the task, not idempotent, needs review.
	res, err := client.SubmitTask(ctx, "task-lost", orbit.SubmitTaskRequest{QueueID: cred.QueueID, Input: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	lost := wstest.Dial(t, wstest.Options{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/workers/connect",
		Subprotocol: "orbit.workers.v1", Token: cred.Token})
	lost.Send("worker.hello", map[string]any{"queue_id": cred.QueueID, "capacity": 1})
	lost.NextType("worker.welcome")
	lost.NextType("task.assign")
	lost.Close()
	waitUntil(t, waitTime, "needs review", func() bool {
		task, err := client.GetTask(ctx, res.Task.ID)
		return err == nil && task.State == "NEEDS_REVIEW"
	}, func() string { return res.Task.ID })

	// A refused WebSocket: not an upgrade.
	srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/events/connect", Token: cred.Token})

	// Every result is materialised for the three subscriptions.
	waitUntil(t, waitTime, "materialised", func() bool {
		for _, id := range subs {
			if len(deliveries(t, srv.DB, id)) != n+1 {
				return false
			}
		}
		return true
	}, func() string { return "" })
	srv.RefreshMetrics(t)
	before := scrapeMetrics(t, srv)
	if lag := before.value("orbit_subscription_lag", "subscription", subs["acked"]); lag != n+1 {
		t.Errorf("lag before consuming %v, want %d", lag, n+1)
	}

	// The consumer of "acked" catches up; that of "nacked" NACKs every
	// delivery (its handler fails), with one attempt each; that of "dead"
	// takes its deliveries and goes away, so that their leases run out.
	cfg := orbit.EventConsumerConfig{BaseURL: srv.URL, Token: cred.Token, Capacity: 4,
		Backoff: orbit.BackoffConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, Logger: testLogger(t)}
	acked, nacked := cfg, cfg
	acked.SubscriptionID, nacked.SubscriptionID = subs["acked"], subs["nacked"]
	startConsumer(t, acked, func(context.Context, *orbit.Delivery) error { return nil })
	startConsumer(t, nacked, func(context.Context, *orbit.Delivery) error { return errors.New("cannot handle it") })
	gone := wstest.Dial(t, wstest.Options{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/events/connect",
		Subprotocol: "orbit.events.v1", Token: cred.Token})
	gone.Send("events.hello", map[string]any{"subscription_id": subs["dead"], "capacity": n + 1})
	gone.NextType("events.welcome")
	for range n + 1 {
		gone.NextType("event.deliver")
	}
	gone.Close()
	expired := func(sub string) int {
		count := 0
		for _, d := range deliveries(t, srv.DB, sub) {
			if d.state == "EXPIRED" {
				count++
			}
		}
		return count
	}
	waitUntil(t, waitTime, "all acked and all dead", func() bool {
		return countAcked(t, srv.DB, subs["acked"]) == n+1 && expired(subs["dead"]) == n+1 && expired(subs["nacked"]) == n+1
	}, func() string { return "" })

	srv.RefreshMetrics(t)
	after := scrapeMetrics(t, srv)
	for _, family := range o2Families {
		if after[family] == nil {
			t.Errorf("family %s missing from the scrape", family)
		}
	}
	ns := cred.NamespaceID
	for _, c := range []struct {
		what   string
		family string
		labels []string
		want   float64
	}{
		{"submitted", "orbit_tasks_submitted_total", []string{"queue", cred.QueueID, "namespace", ns}, n + 1},
		{"succeeded", "orbit_task_results_total", []string{"queue", cred.QueueID, "type", "task.succeeded"}, n},
		{"needs review", "orbit_task_results_total", []string{"queue", cred.QueueID, "type", "task.needs_review"}, 1},
		{"task lease expiries", "orbit_task_lease_expiries_total", []string{"queue", cred.QueueID}, 1},
		{"tasks needing review", "orbit_tasks", []string{"queue", cred.QueueID, "state", "NEEDS_REVIEW"}, 1},
		{"tasks pending", "orbit_tasks", []string{"queue", cred.QueueID, "state", "PENDING"}, 0},
		{"oldest pending age", "orbit_task_oldest_pending_age_seconds", []string{"queue", cred.QueueID}, 0},
		{"log head", "orbit_result_log_head_sequence", []string{"queue", cred.QueueID, "namespace", ns}, n + 1},
		{"retained events", "orbit_result_log_retained_events", []string{"queue", cred.QueueID}, n + 1},
		{"lag caught up", "orbit_subscription_lag", []string{"subscription", subs["acked"], "namespace", ns}, 0},
		{"lag of the idle subscription", "orbit_subscription_lag", []string{"subscription", subs["idle"]}, n + 1},
		{"dead letters", "orbit_dead_letters", []string{"subscription", subs["dead"]}, n + 1},
		{"expired deliveries", "orbit_deliveries", []string{"subscription", subs["dead"], "state", "EXPIRED"}, n + 1},
		{"pending deliveries of idle", "orbit_deliveries", []string{"subscription", subs["idle"], "state", "PENDING"}, n + 1},
		{"idle has no consumer", "orbit_subscription_blocked", []string{"subscription", subs["idle"], "reason", "NO_CONSUMER"}, 1},
		{"idle is blocked once", "orbit_subscription_blocked", []string{"subscription", subs["idle"]}, 1},
		{"acked is not blocked", "orbit_subscription_blocked", []string{"subscription", subs["acked"]}, 0},
		{"acks", "orbit_deliveries_total", []string{"subscription", subs["acked"], "namespace", ns, "outcome", "ack"}, n + 1},
		{"lease expiries", "orbit_deliveries_total", []string{"subscription", subs["dead"], "outcome", "lease_expired"}, n + 1},
		{"NACKs", "orbit_deliveries_total", []string{"subscription", subs["nacked"], "outcome", "nack"}, n + 1},
		{"NACKed dead letters", "orbit_dead_letters", []string{"subscription", subs["nacked"]}, n + 1},
		{"ACK latencies", "orbit_delivery_ack_seconds", nil, n + 1},
		{"first deliveries", "orbit_result_delivery_seconds", nil, 3 * (n + 1)},
		{"consumers connected", "orbit_ws_connections", []string{"entry", "events"}, 2},
		{"refused upgrade", "orbit_ws_refused_total", []string{"entry", "events", "reason", "PROTOCOL_REQUIRED"}, 1},
		{"submissions over HTTP", "orbit_http_requests_total", []string{"route", "/v1/tasks", "code", "OK"}, n + 1},
	} {
		if got := after.value(c.family, c.labels...); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", c.what, c.family, c.labels, got, c.want)
		}
	}
	for _, c := range []struct{ family, label, value string }{
		{"orbit_claim_seconds", "", ""}, {"orbit_claim_wait_seconds", "", ""}, {"orbit_result_sequencing_seconds", "", ""},
		{"orbit_http_request_seconds", "route", "/v1/tasks"},
		{"orbit_db_transactions_total", "outcome", "commit"}, {"orbit_metrics_refresh_queries", "", ""},
	} {
		if got := after.value(c.family, c.label, c.value); got <= 0 {
			t.Errorf("%s{%s=%q} = %v, want > 0", c.family, c.label, c.value, got)
		}
	}
	// Every claim that ran waited for its slot first.
	if waits, claims := after.value("orbit_claim_wait_seconds"), after.value("orbit_claim_seconds"); waits < claims {
		t.Errorf("orbit_claim_wait_seconds counts %v claims, orbit_claim_seconds %v: want at least as many waits", waits, claims)
	}
	if got := after.value("orbit_db_transactions_total", "outcome", "commit_unknown"); got != 0 {
		t.Errorf("commit_unknown = %v, want 0", got)
	}

	// O-4: docs/operations.md names every Orbit family of the scrape.
	t.Run("O4_EveryFamilyDocumented", func(t *testing.T) {
		doc, err := os.ReadFile("../../docs/operations.md")
		if err != nil {
			t.Fatal(err)
		}
		for name := range after {
			if strings.HasPrefix(name, "orbit_") && !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/operations.md does not list %s", name)
			}
		}
	})
}
