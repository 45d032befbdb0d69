package events

import (
	"context"
	"time"

	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/modules/subscriptions"
)

// ACKs of every connection on a node are recorded in shared transactions
// (group commit): while one batch commits, the ACKs arriving meanwhile
// queue up and go together in the next. An ACK is answered only after the
// commit that recorded it, so batching changes no guarantee; it only lets
// many ACKs share one commit.
const (
	// ackFlushers bounds the ACK transactions running at once on a node:
	// two, so that one batch gathers while the other commits.
	ackFlushers = 2
	// maxAckBatch bounds the ACKs of one transaction.
	maxAckBatch = 256
	// ackTimeout bounds one batch's transaction.
	ackTimeout = 8 * time.Second
	// acksPerConnection bounds the ACKs one connection has waiting for
	// their commit; its request loop waits when it reaches the bound.
	acksPerConnection = 2 * maxCapacity
)

// ackRequest is one event.ack waiting for its batch.
type ackRequest = batch.Request[subscriptions.DeliveryAckParams, subscriptions.AckOutcome]

// newAckBatcher returns the node's ACK batcher, recording through deliveries;
// acked runs after a batch that acknowledged at least one delivery, before
// its ACKs are answered, with the subscriptions of the deliveries it
// acknowledged.
func newAckBatcher(deliveries Deliveries, acked func(subscriptionIDs []string)) *batch.Batcher[*ackRequest] {
	return batch.New(ackFlushers, maxAckBatch, func(requests []*ackRequest) {
		batch.Record(requests, ackTimeout, func(ctx context.Context, params []*subscriptions.DeliveryAckParams) ([]subscriptions.AckOutcome, error) {
			outcomes, err := deliveries.DeliveryAckBatch(ctx, params)
			var freed []string
			for i, o := range outcomes {
				if o.Err == nil && !o.Result.Deduplicated {
					freed = append(freed, params[i].SubscriptionID)
				}
			}
			if len(freed) > 0 {
				acked(freed)
			}
			return outcomes, err
		})
	})
}
