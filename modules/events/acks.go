package events

import (
	"context"
	"database/sql"
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
	acksPerConnection = 2 * MaxCapacity
)

// ackRequest is one event.ack waiting for its batch; done runs once with
// its outcome, or with the batch's error when nothing was recorded. done
// runs on the batch's goroutine and must not block.
type ackRequest struct {
	params subscriptions.AckParams
	done   func(subscriptions.AckResult, error)
}

// newAckBatcher returns the node's ACK batcher; acked runs after a batch
// that acknowledged at least one delivery.
func newAckBatcher(pool *sql.DB, acked func()) *batch.Batcher[*ackRequest] {
	return batch.New(ackFlushers, maxAckBatch, func(requests []*ackRequest) {
		recordAcks(pool, requests, acked)
	})
}

// recordAcks runs one batch's transaction and answers every request in it.
func recordAcks(pool *sql.DB, requests []*ackRequest, acked func()) {
	params := make([]*subscriptions.AckParams, len(requests))
	for i, r := range requests {
		params[i] = &r.params
	}
	// The ACKs are recorded even when their connections end meanwhile:
	// the proofs were valid, and a later repeat is deduplicated.
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	outcomes, err := subscriptions.AckBatch(ctx, pool, params)
	cancel()
	if err != nil {
		for _, r := range requests {
			r.done(subscriptions.AckResult{}, err)
		}
		return
	}
	freed := false
	for i, r := range requests {
		o := outcomes[i]
		freed = freed || (o.Err == nil && !o.Result.Deduplicated)
		r.done(o.Result, o.Err)
	}
	if freed {
		acked()
	}
}
