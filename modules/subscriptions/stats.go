package subscriptions

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// Why a subscription does not move (K-10), in the order they are checked.
const (
	BlockedPaused         = "PAUSED"
	BlockedHistoryExpired = "HISTORY_EXPIRED"
	BlockedBacklogFull    = "BACKLOG_FULL"
	BlockedNoConsumer     = "NO_CONSUMER"
	BlockedRetryWait      = "RETRY_WAIT"
)

// Stats is what a subscription shows of its progress (K-10, K-12).
type Stats struct {
	// BlockedReason is "" or the first Blocked… reason that holds.
	BlockedReason string
	// Lag is the queue's head − cursor_sequence + PENDING + LEASED.
	Lag uint64
	// OldestPendingAge is the age of the oldest delivery neither
	// acknowledged nor dead-lettered (PENDING or LEASED), 0 without one.
	OldestPendingAge time.Duration
	// Pending, Leased and DeadLetters count the deliveries in PENDING,
	// LEASED and EXPIRED. ACKED ones are not counted: they only grow.
	Pending, Leased, DeadLetters int
	// RedeliveryHorizon is the queue's retention mark: the lowest
	// sequence that can ever be delivered to the subscription again.
	RedeliveryHorizon uint64
}

// subscriptionStats computes the Stats of subs at now, in q (a pool, or
// the transaction of a write that returns the subscription). A
// subscription with PENDING deliveries and no connected consumer for
// longer than noConsumer is NO_CONSUMER.
//
// Cost, for any number of subscriptions: one grouped read of their live
// deliveries through the claim index (subscription_id, state, sequence),
// which touches only PENDING, LEASED and EXPIRED rows (bounded by each
// backlog, max_pending, plus what retries and replays re-opened above it)
// and never the ACKED history; one read of their open event sessions and,
// for those with work and no open session, one of their latest session
// close, both through ix_event_sessions_subscription; and one primary-key
// read of queue_streams per distinct queue. Nothing scans a whole table.
func subscriptionStats(ctx context.Context, q Querier, log Log, subs []*Subscription, now time.Time, noConsumer time.Duration) (map[string]Stats, error) {
	out := make(map[string]Stats, len(subs))
	if len(subs) == 0 {
		return out, nil
	}
	ids := make([]any, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	type live struct {
		count           int
		oldest, retryAt time.Time
	}
	states := map[string]map[string]live{}
	rows, err := q.QueryContext(ctx, `SELECT subscription_id, state, COUNT(*), MIN(created_at), MIN(available_at)
		FROM event_deliveries WHERE subscription_id IN (`+db.Placeholders(len(ids))+`) AND state IN ('PENDING', 'LEASED', 'EXPIRED')
		GROUP BY subscription_id, state`, ids...)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: stats: %w", err)
	}
	for rows.Next() {
		var id, state string
		var l live
		if err := rows.Scan(&id, &state, &l.count, &l.oldest, &l.retryAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("subscriptions: stats: %w", err)
		}
		if states[id] == nil {
			states[id] = map[string]live{}
		}
		states[id][state] = l
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscriptions: stats: %w", err)
	}
	open, err := db.QueryCounts(ctx, q, `SELECT subscription_id, COUNT(*) FROM event_sessions
		WHERE subscription_id IN (`+db.Placeholders(len(ids))+`) AND closed_at IS NULL GROUP BY subscription_id`, ids...)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: stats: %w", err)
	}
	var idle []any
	for _, s := range subs {
		if states[s.ID][statePending].count > 0 && open[s.ID] == 0 {
			idle = append(idle, s.ID)
		}
	}
	lastClose := map[string]time.Time{}
	if len(idle) > 0 {
		rows, err := q.QueryContext(ctx, `SELECT subscription_id, MAX(closed_at) FROM event_sessions
			WHERE subscription_id IN (`+db.Placeholders(len(idle))+`) GROUP BY subscription_id`, idle...)
		if err != nil {
			return nil, fmt.Errorf("subscriptions: stats: %w", err)
		}
		for rows.Next() {
			var id string
			var at sql.NullTime
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("subscriptions: stats: %w", err)
			}
			if at.Valid {
				lastClose[id] = at.Time
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("subscriptions: stats: %w", err)
		}
	}
	streams := map[string]streamMarks{}
	for _, s := range subs {
		if _, ok := streams[s.QueueID]; ok {
			continue
		}
		st, err := log.StreamGet(ctx, q, s.QueueID)
		if err != nil {
			return nil, fmt.Errorf("subscriptions: stats: %w", err)
		}
		streams[s.QueueID] = streamMarks{head: st.Head, mark: st.RetentionMark}
	}
	for _, s := range subs {
		l, stream := states[s.ID], streams[s.QueueID]
		pending, leased, expired := l[statePending], l[stateLeased], l[stateExpired]
		st := Stats{
			Pending: pending.count, Leased: leased.count, DeadLetters: expired.count,
			Lag:               uint64(pending.count + leased.count),
			RedeliveryHorizon: stream.mark,
		}
		if stream.head > s.CursorSequence {
			st.Lag += stream.head - s.CursorSequence
		}
		var oldest time.Time
		for _, x := range []live{pending, leased} {
			if x.count > 0 && (oldest.IsZero() || x.oldest.Before(oldest)) {
				oldest = x.oldest
			}
		}
		if !oldest.IsZero() && now.After(oldest) {
			st.OldestPendingAge = now.Sub(oldest)
		}
		since, closed := lastClose[s.ID]
		if !closed {
			since = s.CreatedAt
		}
		switch {
		case !s.Enabled:
			st.BlockedReason = BlockedPaused
		case s.CursorSequence < stream.head && s.CursorSequence+1 < stream.mark:
			st.BlockedReason = BlockedHistoryExpired
		case pending.count+leased.count+expired.count >= s.MaxPending:
			st.BlockedReason = BlockedBacklogFull
		case pending.count > 0 && open[s.ID] == 0 && now.Sub(since) > noConsumer:
			st.BlockedReason = BlockedNoConsumer
		case pending.count > 0 && pending.retryAt.After(now):
			st.BlockedReason = BlockedRetryWait
		}
		out[s.ID] = st
	}
	return out, nil
}

// streamMarks are a queue log's head and retention mark.
type streamMarks struct{ head, mark uint64 }

// subscriptionsGet returns the subscriptions with the given ids that
// exist, in no particular order.
func subscriptionsGet(ctx context.Context, q Querier, ids []string) ([]*Subscription, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := db.Args(ids)
	out, err := db.QueryAll(ctx, q, scanSubscription, `SELECT `+subscriptionColumns+` FROM subscriptions s WHERE s.id IN (`+db.Placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: get: %w", err)
	}
	return out, nil
}
