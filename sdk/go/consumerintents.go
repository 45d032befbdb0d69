package orbit

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// AckIntentStore is where a receiver keeps the acknowledgements it owes
// across restarts (an "ACK intent", K-13). The receiver writes a
// delivery's Proof into its own database in the same transaction as the
// business change the delivery caused; an EventConsumer with
// EventConsumerConfig.AckIntents set then sends every stored proof first
// thing on each connection, before any new delivery, and reports each
// answer back so the store can forget the proof. A process killed
// between its commit and its ACK therefore acknowledges the delivery when
// it starts again, without the event being delivered again while the
// lease still stands.
//
// Proofs hold lease secrets: keep them only in the receiver's own
// database, never in a log.
type AckIntentStore interface {
	// AckIntents returns the stored proofs of the consumer's subscription
	// that are not settled yet. It is called before every connection,
	// the first one included; an error delays the connection like a
	// failed dial. It should be one cheap read.
	AckIntents(ctx context.Context) ([]AckProof, error)
	// AckIntentSettled is called once the server has answered proof for
	// good: acknowledged (also as deduplicated), or refused because a
	// newer lease replaced it or it is malformed. It is called for every
	// settled proof, also ones never stored, so it must treat an unknown
	// proof as done, and must keep a stored proof of the same delivery
	// with a higher epoch. An error is logged; the proof is then sent
	// again on a later connection and answered as deduplicated.
	AckIntentSettled(ctx context.Context, proof AckProof) error
}

// ackIntentSettleTimeout bounds one AckIntentSettled call.
const ackIntentSettleTimeout = 2 * time.Second

// loadAckIntents reads the stored proofs before a connection, or returns
// nil when the consumer keeps none. It runs in the dialling goroutine.
func (r *consumerRun) loadAckIntents(ctx context.Context) ([]AckProof, error) {
	store := r.c.cfg.AckIntents
	if store == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.replyTimeout)
	defer cancel()
	proofs, err := store.AckIntents(ctx)
	if err != nil {
		return nil, fmt.Errorf("orbit consumer: read ACK intents: %w", err)
	}
	return proofs, nil
}

// takeAckIntents adds stored proofs to the acknowledgements that wait for
// an answer, unless one of the same delivery with the same or a higher
// epoch is already there; the connection then sends them all first.
func (r *consumerRun) takeAckIntents(proofs []AckProof) {
	added := 0
	for _, p := range proofs {
		if cur := r.pending[p.DeliveryID]; cur != nil && cur.proof.Epoch >= p.Epoch {
			continue
		}
		r.pending[p.DeliveryID] = &pendingAck{proof: p}
		added++
	}
	if added > 0 {
		r.log.Info("orbit consumer: sending stored ACK intents", slog.Int("intents", added))
	}
}

// settleAckIntent tells the store in the background that proof is
// answered for good. During a shutdown the call is bounded by the
// shutdown's end.
func (r *consumerRun) settleAckIntent(proof AckProof) {
	store := r.c.cfg.AckIntents
	if store == nil {
		return
	}
	deadline := time.Now().Add(ackIntentSettleTimeout)
	if r.draining && r.deadline.Before(deadline) {
		deadline = r.deadline
	}
	log := r.log
	r.goBackground(func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := store.AckIntentSettled(ctx, proof); err != nil {
			log.Warn("orbit consumer: cannot clear the ACK intent; it will be sent again on the next connection",
				slog.String("delivery_id", proof.DeliveryID), slog.Uint64("epoch", proof.Epoch), slog.String("error", err.Error()))
		}
	})
}
