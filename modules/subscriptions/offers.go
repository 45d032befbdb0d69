package subscriptions

import (
	"context"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// What the subscriptions module offers to the modules that require it or
// look for it: the delivery state machine, driven by the events module
// through the interface it declares (events.Deliveries), and the retention
// hold that the tasks module asks before it purges (tasks.RetentionHold).
// Each method runs the package function of the same name on the module's
// pool; see there for its contract.

// EventSessionOpen records a new event connection and returns its id.
func (m *Module) EventSessionOpen(ctx context.Context, p *EventSessionOpenParams) (string, error) {
	return EventSessionOpen(ctx, m.db, m.apps, p)
}

// EventSessionClose marks an event connection closed.
func (m *Module) EventSessionClose(ctx context.Context, sessionID string) error {
	return EventSessionClose(ctx, m.db, sessionID)
}

// SubscriptionGet returns a subscription by id, or sql.ErrNoRows.
func (m *Module) SubscriptionGet(ctx context.Context, id string) (*Subscription, error) {
	return subscriptionGet(ctx, m.db, id)
}

// DeliveryMaterialize materialises one batch of a subscription, of the configured
// size (materialize_batch).
func (m *Module) DeliveryMaterialize(ctx context.Context, subscriptionID string) (created int, more bool, err error) {
	return deliveryMaterialize(ctx, m.db, m.log, subscriptionID, m.cfg.MaterializeBatch)
}

// DeliveryClaim leases deliveries for one event connection, and reports
// whether its capacity is taken (see deliveryClaim).
func (m *Module) DeliveryClaim(ctx context.Context, p *DeliveryClaimParams) (leases []Lease, full bool, err error) {
	leases, full, err = deliveryClaim(withMetrics(ctx, m.metrics), m.db, m.log, m.auth, &m.floors, p)
	if err == nil && len(leases) > 0 {
		m.activity.add(leases[0].Delivery.SubscriptionID, time.Now(), len(leases), 0)
	}
	return leases, full, err
}

// DeliveryOutcome counts n outcomes (OutcomeAck, OutcomeNack,
// OutcomeReject, OutcomeExtend; lease expiries are counted by the store
// itself) of a subscription in orbit_deliveries_total. Call it once the
// outcome is committed. namespaceID may be "" when the caller does not
// know it.
func (m *Module) DeliveryOutcome(subscriptionID, namespaceID, outcome string, n int) {
	m.metrics.count(context.Background(), subscriptionID, namespaceID, outcome, n)
	if outcome == OutcomeAck {
		m.activity.add(subscriptionID, time.Now(), 0, n)
	}
}

// DeliveryActivity returns the deliveries this node leased and the first
// ACKs it recorded for a subscription in each of the last 30 minutes,
// oldest first (the console's chart). Counts live in memory: each node
// counts its own event connections since it started. The caller checks
// that its principal may read the subscription.
func (m *Module) DeliveryActivity(subscriptionID string) []ActivityMinute {
	return m.activity.minutes(subscriptionID, time.Now())
}

// DeliveryAckBatch records ACKs in one transaction.
func (m *Module) DeliveryAckBatch(ctx context.Context, acks []*DeliveryAckParams) ([]AckOutcome, error) {
	return deliveryAckBatch(ctx, m.db, m.auth, acks)
}

// DeliveryControlBatch records extensions, NACKs and rejects in one
// transaction. Deliveries a NACK made PENDING may be claimable: it wakes
// the event connections of this node.
func (m *Module) DeliveryControlBatch(ctx context.Context, requests []*DeliveryControlParams) ([]ControlOutcome, error) {
	outcomes, err := deliveryControlBatch(ctx, m.db, m.auth, requests)
	var pending []string
	for i, o := range outcomes {
		if o.Err == nil && o.Result.State == statePending {
			pending = append(pending, requests[i].SubscriptionID)
		}
	}
	if len(pending) > 0 {
		m.madePending(pending...)
	}
	return outcomes, err
}

// DeliveryUnsent gives back a lease whose event.deliver was never sent.
func (m *Module) DeliveryUnsent(ctx context.Context, l *Lease, delay time.Duration) (bool, error) {
	given, err := deliveryUnsent(ctx, m.db, l, delay)
	if given {
		m.floors.forget(l.Delivery.SubscriptionID)
	}
	return given, err
}

// madePending is told, once committed, that deliveries of these
// subscriptions became PENDING again (NACKed, retried, replayed):
// it forgets their claim floors, which may stand above them, and wakes
// the event connections.
func (m *Module) madePending(subscriptionIDs ...string) {
	m.floors.forget(subscriptionIDs...)
	m.claimable.NotifyAll()
}

// Claimable returns a channel closed when deliveries of any subscription
// may have become claimable on this node (recovered, retried, materialised
// by the materialiser, or committed on another node), so event connections
// claim without waiting for a poll.
func (m *Module) Claimable() <-chan struct{} { return m.claimable.C() }

// ClaimableFor returns a channel closed when a sequencing pass of this
// node created deliveries of the subscription. An event connection waits
// on it and on Claimable.
func (m *Module) ClaimableFor(subscriptionID string) <-chan struct{} {
	return m.claimable.KeyC(subscriptionID)
}

// RoomFreed tells the background materialiser that ACKs made room in the
// backlogs of these subscriptions, named once per acknowledged delivery:
// its next run woken by ACKs looks at those worth a refill (freedRoom)
// alone.
func (m *Module) RoomFreed(subscriptionIDs []string) {
	if m.freed.add(subscriptionIDs) {
		m.roomFreed.Notify()
	}
}

// RetentionHeld returns the lowest sequence in [from, to) of a queue's log
// that a live delivery holds, in the purge's transaction q.
func (m *Module) RetentionHeld(ctx context.Context, q Querier, queueID string, from, to uint64) (uint64, error) {
	return retentionHeld(ctx, q, queueID, from, to)
}

// SubscriptionStats returns the progress of the given subscriptions, keyed
// by id, as their GET shows it (K-10, K-12); ids that do not exist are
// absent. It costs a handful of index-backed statements for any number of
// ids (see subscriptionStats), never a scan of the ACKED history: meant
// for API reads and for a metrics collector's gauges.
func (m *Module) SubscriptionStats(ctx context.Context, ids []string) (map[string]Stats, error) {
	subs, err := subscriptionsGet(ctx, m.db, ids)
	if err != nil {
		return nil, err
	}
	return subscriptionStats(ctx, m.db, m.log, subs, db.Now(), m.cfg.NoConsumerAfter)
}

// RedeliveryHorizon returns the redelivery horizon of a queue's
// subscriptions (K-12): its log's retention mark, the lowest sequence that
// can ever be delivered again. One primary-key read.
func (m *Module) RedeliveryHorizon(ctx context.Context, queueID string) (uint64, error) {
	st, err := m.log.StreamGet(ctx, m.db, queueID)
	if err != nil {
		return 0, err
	}
	return st.RetentionMark, nil
}
