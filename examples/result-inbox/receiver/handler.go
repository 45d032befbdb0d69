package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	orbit "github.com/orbitrun/orbit/sdk/go"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
)

// Outcome classifies what happened to one event, for the receiver's output
// . It never carries credentials, result bodies or lease proofs.
type Outcome string

// Outcomes printed by consume and demo.
const (
	OutcomeApplied           Outcome = "applied"
	OutcomeDuplicate         Outcome = "duplicate"
	OutcomeStale             Outcome = "stale"
	OutcomeConflict          Outcome = "conflict"
	OutcomeWrongQueue        Outcome = "wrong_queue"
	OutcomeInvalidEvent      Outcome = "invalid_event"
	OutcomeCommitUnconfirmed Outcome = "commit_unconfirmed"
	OutcomeStorageError      Outcome = "storage_error"
	OutcomeRefused           Outcome = "refused"
)

// Classify maps an Apply result to a stable outcome.
func Classify(r inbox.Result, err error) Outcome {
	switch {
	case err == nil && r.Duplicate:
		return OutcomeDuplicate
	case err == nil && r.Applied:
		return OutcomeApplied
	case err == nil:
		return OutcomeStale
	case errors.Is(err, inbox.ErrConflict):
		return OutcomeConflict
	case errors.Is(err, inbox.ErrWrongQueue):
		return OutcomeWrongQueue
	case errors.Is(err, inbox.ErrInvalidEvent):
		return OutcomeInvalidEvent
	case errors.Is(err, inbox.ErrCommitUnconfirmed):
		return OutcomeCommitUnconfirmed
	default:
		return OutcomeStorageError
	}
}

// EventJSON returns the event of a delivery as the JSON the server sent.
func EventJSON(d *orbit.Delivery) ([]byte, error) {
	if len(d.EventJSON) > 0 {
		return d.EventJSON, nil
	}
	return json.Marshal(d.Event)
}

// printer serialises output lines of concurrent handlers.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// applyHandler returns the consumer handler that applies each event through
// store, with the delivery's ACK proof as an ACK intent in the same
// transaction (K-13), and prints one classification line per event.
func applyHandler(store *inbox.Store, p *printer) orbit.EventHandler {
	return func(ctx context.Context, d *orbit.Delivery) error {
		raw, err := EventJSON(d)
		if err != nil {
			p.line("event=%s type=%s outcome=%s", d.Event.ID, d.Event.Type, OutcomeInvalidEvent)
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, ConsumeHandlerTimeout)
		defer cancel()
		r, err := store.ApplyWithIntent(ctx, raw, inbox.AckIntent{
			SubscriptionID: d.SubscriptionID, DeliveryID: d.Proof.DeliveryID, Epoch: d.Proof.Epoch, LeaseSecret: d.Proof.LeaseSecret,
		})
		p.line("event=%s type=%s outcome=%s", d.Event.ID, d.Event.Type, Classify(r, err))
		return err
	}
}

// ackIntents is the receiver's orbit.AckIntentStore: the ACK intents of
// one subscription in its own database (K-13).
type ackIntents struct {
	store          *inbox.Store
	subscriptionID string
}

// AckIntents returns the subscription's uncleared intents as proofs.
func (a ackIntents) AckIntents(ctx context.Context) ([]orbit.AckProof, error) {
	intents, err := a.store.AckIntents(ctx, a.subscriptionID)
	if err != nil {
		return nil, err
	}
	proofs := make([]orbit.AckProof, len(intents))
	for i, it := range intents {
		proofs[i] = orbit.AckProof{DeliveryID: it.DeliveryID, Epoch: it.Epoch, LeaseSecret: it.LeaseSecret}
	}
	return proofs, nil
}

// AckIntentSettled clears the intent of an answered proof.
func (a ackIntents) AckIntentSettled(ctx context.Context, p orbit.AckProof) error {
	return a.store.AckIntentClear(ctx, a.subscriptionID, p.DeliveryID, p.Epoch)
}

var _ orbit.AckIntentStore = ackIntents{}
