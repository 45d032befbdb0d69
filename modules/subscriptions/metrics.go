package subscriptions

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/metrics"
)

// Outcomes of a delivery counted by orbit_deliveries_total.
const (
	OutcomeAck          = "ack"
	OutcomeNack         = "nack"
	OutcomeReject       = "reject"
	OutcomeLeaseExpired = "lease_expired"
	OutcomeExtend       = "extend"
)

// blockedReasons are the reasons of orbit_subscription_blocked, in the
// order K-10 tests them.
var blockedReasons = []string{BlockedPaused, BlockedHistoryExpired, BlockedBacklogFull, BlockedNoConsumer, BlockedRetryWait}

const (
	// metricsMaxSubscriptions bounds the subscriptions the gauges cover,
	// in id order (each namespace has at most 64).
	metricsMaxSubscriptions = 10_000
	// statsGroup is how many subscriptions one subscriptionStats call
	// covers.
	statsGroup = 100
)

// deliveryMetrics are the subscriptions module's metrics. A nil
// *deliveryMetrics counts nothing.
type deliveryMetrics struct {
	pool       *sql.DB
	log        Log
	noConsumer time.Duration
	outcomes   *prometheus.CounterVec

	// namespaces caches the namespace of each subscription counted, for
	// the label of counters whose call site knows only the subscription.
	namespaces sync.Map // subscription id -> namespace id

	lag, oldestAge, deliveries, deadLetters, blocked *metrics.Snapshot
}

func newDeliveryMetrics(reg *metrics.Registry, pool *sql.DB, log Log, noConsumer time.Duration) *deliveryMetrics {
	return &deliveryMetrics{
		pool: pool, log: log, noConsumer: noConsumer,
		outcomes: reg.CounterVec("deliveries_total",
			"Delivery outcomes by subscription: ack (first valid ACK), nack, reject, lease_expired (a lease ran out and was recovered), extend.",
			"subscription", "namespace", "outcome"),
		lag: reg.Snapshot("subscription_lag",
			"Events the subscription has not yet had acknowledged at the last refresh: head sequence - cursor + PENDING + LEASED (K-10).",
			"subscription", "namespace"),
		oldestAge: reg.Snapshot("subscription_oldest_pending_age_seconds",
			"Age of the subscription's oldest delivery neither acknowledged nor dead-lettered (PENDING or LEASED) at the last refresh; 0 without one.",
			"subscription", "namespace"),
		deliveries: reg.Snapshot("deliveries",
			"Deliveries of the subscription in each backlog state (PENDING, LEASED, EXPIRED) at the last refresh.",
			"subscription", "namespace", "state"),
		deadLetters: reg.Snapshot("dead_letters",
			"EXPIRED deliveries of the subscription (dead letters) at the last refresh.", "subscription", "namespace"),
		blocked: reg.Snapshot("subscription_blocked",
			"1 for the reason the subscription does not move (K-10 blocked_reason), 0 for the other reasons, at the last refresh.",
			"subscription", "namespace", "reason"),
	}
}

// count adds n outcomes of a subscription in namespaceID ("" when the
// caller does not know it: the cache, or one primary-key read, tells).
func (m *deliveryMetrics) count(ctx context.Context, subscriptionID, namespaceID, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	if namespaceID == "" {
		namespaceID = m.namespace(ctx, subscriptionID)
	} else {
		m.namespaces.Store(subscriptionID, namespaceID)
	}
	m.outcomes.WithLabelValues(subscriptionID, namespaceID, outcome).Add(float64(n))
}

// namespace returns the namespace of a subscription from the cache, or
// reads it once.
func (m *deliveryMetrics) namespace(ctx context.Context, subscriptionID string) string {
	if ns, ok := m.namespaces.Load(subscriptionID); ok {
		return ns.(string)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var ns string
	if err := m.pool.QueryRowContext(ctx, `SELECT namespace_id FROM subscriptions WHERE id = ?`, subscriptionID).Scan(&ns); err != nil {
		return ""
	}
	m.namespaces.Store(subscriptionID, ns)
	return ns
}

type metricsKey struct{}

// withMetrics returns ctx carrying m, for the store functions that count
// what their transactions did (leaseExpiredOnCommit).
func withMetrics(ctx context.Context, m *deliveryMetrics) context.Context {
	if m == nil {
		return ctx
	}
	return context.WithValue(ctx, metricsKey{}, m)
}

// leaseExpiredOnCommit counts, once tx commits, the expired leases it
// recovered, by subscription; with the metrics ctx carries (withMetrics),
// or none.
func leaseExpiredOnCommit(ctx context.Context, tx *sql.Tx, bySubscription map[string]int) {
	m, _ := ctx.Value(metricsKey{}).(*deliveryMetrics)
	if m == nil || len(bySubscription) == 0 {
		return
	}
	db.OnCommit(tx, func() {
		for id, n := range bySubscription {
			m.count(ctx, id, "", OutcomeLeaseExpired, n)
		}
	})
}

// RefreshMetrics recomputes the subscription gauges (metrics.Refresher):
// one statement lists the subscriptions (primary key), then
// subscriptionStats, the K-10 computation the API shows, runs for each
// group of statsGroup of them.
func (m *deliveryMetrics) RefreshMetrics(ctx context.Context, q *metrics.Querier) error {
	subs, err := db.QueryAll(ctx, q, func(row db.Scanner) (*Subscription, error) {
		var s Subscription
		err := row.Scan(&s.ID, &s.NamespaceID, &s.QueueID, &s.Enabled, &s.CursorSequence, &s.MaxPending, &s.CreatedAt)
		return &s, err
	}, `SELECT id, namespace_id, queue_id, enabled, cursor_sequence, max_pending, created_at
		FROM subscriptions ORDER BY id LIMIT ?`, metricsMaxSubscriptions)
	if err != nil {
		return fmt.Errorf("subscriptions: metrics: %w", err)
	}
	now := db.Now()
	var lag, ages, deliveries, dead, blocked []metrics.Sample
	for group := range slices.Chunk(subs, statsGroup) {
		stats, err := subscriptionStats(ctx, q, m.log, group, now, m.noConsumer)
		if err != nil {
			return fmt.Errorf("subscriptions: metrics: %w", err)
		}
		for _, s := range group {
			st := stats[s.ID]
			m.namespaces.Store(s.ID, s.NamespaceID)
			labels := []string{s.ID, s.NamespaceID}
			lag = append(lag, metrics.Sample{Labels: labels, Value: float64(st.Lag)})
			ages = append(ages, metrics.Sample{Labels: labels, Value: st.OldestPendingAge.Seconds()})
			dead = append(dead, metrics.Sample{Labels: labels, Value: float64(st.DeadLetters)})
			for _, x := range []struct {
				state string
				n     int
			}{{statePending, st.Pending}, {stateLeased, st.Leased}, {stateExpired, st.DeadLetters}} {
				deliveries = append(deliveries, metrics.Sample{Labels: []string{s.ID, s.NamespaceID, x.state}, Value: float64(x.n)})
			}
			for _, reason := range blockedReasons {
				v := 0.0
				if reason == st.BlockedReason {
					v = 1
				}
				blocked = append(blocked, metrics.Sample{Labels: []string{s.ID, s.NamespaceID, reason}, Value: v})
			}
		}
	}
	m.lag.Set(lag)
	m.oldestAge.Set(ages)
	m.deliveries.Set(deliveries)
	m.deadLetters.Set(dead)
	m.blocked.Set(blocked)
	return nil
}

var _ metrics.Refresher = (*deliveryMetrics)(nil)
