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
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Outcomes of a delivery counted by orbit_deliveries_total.
const (
	OutcomeAck          = "ack"
	OutcomeNack         = "nack"
	OutcomeReject       = "reject"
	OutcomeLeaseExpired = "lease_expired"
	OutcomeExtend       = "extend"
)

// Reasons of orbit_subscription_blocked, in the order K-10 tests them: the
// first that holds is the subscription's reason.
const (
	BlockedPaused         = "PAUSED"
	BlockedHistoryExpired = "HISTORY_EXPIRED"
	BlockedBacklogFull    = "BACKLOG_FULL"
	BlockedNoConsumer     = "NO_CONSUMER"
	BlockedRetryWait      = "RETRY_WAIT"
)

var blockedReasons = []string{BlockedPaused, BlockedHistoryExpired, BlockedBacklogFull, BlockedNoConsumer, BlockedRetryWait}

const (
	// metricsMaxSubscriptions bounds the subscriptions the gauges cover,
	// in id order (each namespace has at most 64).
	metricsMaxSubscriptions = 10_000
	// statsGroup is how many subscriptions one statistics statement covers.
	statsGroup = 100
	// noConsumerAfter is how long PENDING deliveries may wait without a
	// connected consumer before the subscription counts as NO_CONSUMER:
	// one heartbeat interval, the time a consumer has to reconnect.
	noConsumerAfter = wsx.DefaultHeartbeatInterval
)

// deliveryMetrics are the subscriptions module's metrics. A nil
// *deliveryMetrics counts nothing.
type deliveryMetrics struct {
	pool     *sql.DB
	log      Log
	outcomes *prometheus.CounterVec

	// namespaces caches the namespace of each subscription counted, for
	// the label of counters whose call site knows only the subscription.
	namespaces sync.Map // subscription id -> namespace id

	lag, oldestAge, deliveries, deadLetters, blocked *metrics.Snapshot
}

func newDeliveryMetrics(reg *metrics.Registry, pool *sql.DB, log Log) *deliveryMetrics {
	return &deliveryMetrics{
		pool: pool, log: log,
		outcomes: reg.CounterVec("deliveries_total",
			"Delivery outcomes by subscription: ack (first valid ACK), nack, reject, lease_expired (a lease ran out and was recovered), extend.",
			"subscription", "namespace", "outcome"),
		lag: reg.Snapshot("subscription_lag",
			"Events the subscription has not yet had acknowledged at the last refresh: head sequence - cursor + PENDING + LEASED (K-10).",
			"subscription", "namespace"),
		oldestAge: reg.Snapshot("subscription_oldest_pending_age_seconds",
			"Age of the subscription's oldest PENDING delivery at the last refresh; 0 when none is pending.",
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

// SubscriptionStats is what the gauges show of one subscription (K-10).
type SubscriptionStats struct {
	ID, NamespaceID string
	// Lag is head sequence - cursor + PENDING + LEASED.
	Lag uint64
	// Pending, Leased and Expired count the deliveries in each state;
	// Expired are the dead letters.
	Pending, Leased, Expired int
	// OldestPendingAge is the age of the oldest PENDING delivery, 0 when
	// none is pending.
	OldestPendingAge time.Duration
	// BlockedReason is "" or the first of blockedReasons that holds.
	BlockedReason string
}

// RefreshMetrics recomputes the subscription gauges (metrics.Refresher)
// from subscriptionStatsList.
func (m *deliveryMetrics) RefreshMetrics(ctx context.Context, q *metrics.Querier) error {
	stats, err := subscriptionStatsList(ctx, q, m.log, db.Now())
	if err != nil {
		return fmt.Errorf("subscriptions: metrics: %w", err)
	}
	var lag, ages, deliveries, dead, blocked []metrics.Sample
	for _, s := range stats {
		m.namespaces.Store(s.ID, s.NamespaceID)
		labels := []string{s.ID, s.NamespaceID}
		lag = append(lag, metrics.Sample{Labels: labels, Value: float64(s.Lag)})
		ages = append(ages, metrics.Sample{Labels: labels, Value: s.OldestPendingAge.Seconds()})
		dead = append(dead, metrics.Sample{Labels: labels, Value: float64(s.Expired)})
		for _, st := range []struct {
			state string
			n     int
		}{{statePending, s.Pending}, {stateLeased, s.Leased}, {stateExpired, s.Expired}} {
			deliveries = append(deliveries, metrics.Sample{Labels: []string{s.ID, s.NamespaceID, st.state}, Value: float64(st.n)})
		}
		for _, reason := range blockedReasons {
			v := 0.0
			if reason == s.BlockedReason {
				v = 1
			}
			blocked = append(blocked, metrics.Sample{Labels: []string{s.ID, s.NamespaceID, reason}, Value: v})
		}
	}
	m.lag.Set(lag)
	m.oldestAge.Set(ages)
	m.deliveries.Set(deliveries)
	m.deadLetters.Set(dead)
	m.blocked.Set(blocked)
	return nil
}

// subscriptionStatsList computes the K-10 figures of every subscription
// (up to metricsMaxSubscriptions) with bounded, index-backed statements:
// one for the subscriptions (primary key), one per queue for its log head
// and retention mark (tasks' StreamGet, primary key), and per group of 100
// subscriptions one over their backlog deliveries (PENDING, LEASED and
// EXPIRED, at most max_pending each, through ix_event_deliveries_claim_order)
// and two over their sessions (ix_event_sessions_subscription: the open
// ones, and the latest close of each).
//
// It is the metrics' own computation, kept apart so that it can give way
// to the subscriptions store's shared one when that lands.
func subscriptionStatsList(ctx context.Context, q *metrics.Querier, log Log, now time.Time) ([]SubscriptionStats, error) {
	type sub struct {
		id, namespace, queue string
		enabled              bool
		cursor               uint64
		maxPending           int
	}
	rows, err := q.QueryContext(ctx, `SELECT id, namespace_id, queue_id, enabled, cursor_sequence, max_pending
		FROM subscriptions ORDER BY id LIMIT ?`, metricsMaxSubscriptions)
	if err != nil {
		return nil, err
	}
	var subs []sub
	for rows.Next() {
		var s sub
		if err := rows.Scan(&s.id, &s.namespace, &s.queue, &s.enabled, &s.cursor, &s.maxPending); err != nil {
			rows.Close()
			return nil, err
		}
		subs = append(subs, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	streams := map[string]tasks.Stream{}
	for _, s := range subs {
		if _, ok := streams[s.queue]; !ok {
			st, err := log.StreamGet(ctx, q, s.queue)
			if err != nil {
				return nil, err
			}
			streams[s.queue] = st
		}
	}
	out := make([]SubscriptionStats, 0, len(subs))
	for group := range slices.Chunk(subs, statsGroup) {
		ids := make([]any, len(group))
		for i, s := range group {
			ids[i] = s.id
		}
		backlog, err := backlogStats(ctx, q, ids)
		if err != nil {
			return nil, err
		}
		consumers, err := consumerStats(ctx, q, ids)
		if err != nil {
			return nil, err
		}
		for _, s := range group {
			b, c, st := backlog[s.id], consumers[s.id], streams[s.queue]
			stats := SubscriptionStats{ID: s.id, NamespaceID: s.namespace, Pending: b.pending, Leased: b.leased, Expired: b.expired}
			if st.Head > s.cursor {
				stats.Lag = st.Head - s.cursor
			}
			stats.Lag += uint64(b.pending + b.leased)
			if b.oldestPending != nil {
				stats.OldestPendingAge = max(0, now.Sub(*b.oldestPending))
			}
			noConsumer := c.open == 0 && (c.lastClosed == nil || now.Sub(*c.lastClosed) > noConsumerAfter)
			switch {
			case !s.enabled:
				stats.BlockedReason = BlockedPaused
			case st.Head > s.cursor && s.cursor+1 < st.RetentionMark:
				stats.BlockedReason = BlockedHistoryExpired
			case b.pending+b.leased+b.expired >= s.maxPending:
				stats.BlockedReason = BlockedBacklogFull
			case b.pending > 0 && noConsumer:
				stats.BlockedReason = BlockedNoConsumer
			case b.pending > 0 && b.nextAvailable != nil && b.nextAvailable.After(now):
				stats.BlockedReason = BlockedRetryWait
			}
			out = append(out, stats)
		}
	}
	return out, nil
}

type backlog struct {
	pending, leased, expired int
	oldestPending            *time.Time
	nextAvailable            *time.Time
}

// backlogStats counts the backlog deliveries of the subscriptions ids by
// state, with the oldest creation and the earliest availability of the
// PENDING ones.
func backlogStats(ctx context.Context, q *metrics.Querier, ids []any) (map[string]backlog, error) {
	rows, err := q.QueryContext(ctx, `SELECT subscription_id, state, COUNT(*), MIN(created_at), MIN(available_at)
		FROM event_deliveries WHERE subscription_id IN (`+db.Placeholders(len(ids))+`)
		AND state IN ('PENDING', 'LEASED', 'EXPIRED') GROUP BY subscription_id, state`, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]backlog{}
	for rows.Next() {
		var id, state string
		var n int
		var oldest, next time.Time
		if err := rows.Scan(&id, &state, &n, &oldest, &next); err != nil {
			return nil, err
		}
		b := out[id]
		switch state {
		case statePending:
			b.pending, b.oldestPending, b.nextAvailable = n, &oldest, &next
		case stateLeased:
			b.leased = n
		case stateExpired:
			b.expired = n
		}
		out[id] = b
	}
	return out, rows.Err()
}

type consumers struct {
	open       int
	lastClosed *time.Time
}

// consumerStats counts the open event sessions of the subscriptions ids
// and finds when the last one of each closed.
func consumerStats(ctx context.Context, q *metrics.Querier, ids []any) (map[string]consumers, error) {
	out := map[string]consumers{}
	in := db.Placeholders(len(ids))
	rows, err := q.QueryContext(ctx, `SELECT subscription_id, COUNT(*) FROM event_sessions
		WHERE subscription_id IN (`+in+`) AND closed_at IS NULL GROUP BY subscription_id`, ids...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return nil, err
		}
		c := out[id]
		c.open = n
		out[id] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = q.QueryContext(ctx, `SELECT subscription_id, MAX(closed_at) FROM event_sessions
		WHERE subscription_id IN (`+in+`) GROUP BY subscription_id`, ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var last sql.NullTime
		if err := rows.Scan(&id, &last); err != nil {
			return nil, err
		}
		if last.Valid {
			c := out[id]
			c.lastClosed = &last.Time
			out[id] = c
		}
	}
	return out, rows.Err()
}

var _ metrics.Refresher = (*deliveryMetrics)(nil)
