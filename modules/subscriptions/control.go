package subscriptions

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// ControlVerb is what a consumer asks of the lease it holds, besides an
// ACK (K-1 … K-3).
type ControlVerb int

// The verbs of event.extend, event.nack and event.reject.
const (
	ControlExtend ControlVerb = iota + 1
	ControlNack
	ControlReject
)

// MaxControlReason bounds the reason of a NACK or a reject, in bytes.
const MaxControlReason = 512

// DeliveryControlParams are one event.extend, event.nack or event.reject,
// fenced by the same proof as an ACK.
type DeliveryControlParams struct {
	Verb ControlVerb
	// Grant is what the frame's credential must still hold (see
	// DeliveryClaim).
	Grant          auth.Grant
	SubscriptionID string
	DeliveryID     string
	Epoch          uint64
	Secret         string
	// ExtendBy is how far past now an extension sets lease_until; it
	// must be positive.
	ExtendBy time.Duration
	// Delay is a NACK's delay_ms; nil means the subscription's retry
	// policy.
	Delay *time.Duration
	// Reason is a NACK's or a reject's reason, kept as last_error; ""
	// for a NACK without one.
	Reason string
}

// ControlResult is what the ack of an event.extend, event.nack or
// event.reject carries: the delivery's state after it, with lease_until
// after an extension, available_at after a NACK that left attempts, and
// expired_reason when the delivery became EXPIRED.
type ControlResult struct {
	DeliveryID    string       `json:"delivery_id"`
	EventID       string       `json:"event_id"`
	Epoch         httpx.Uint64 `json:"epoch"`
	State         string       `json:"state"`
	LeaseUntil    string       `json:"lease_until,omitempty"`
	AvailableAt   string       `json:"available_at,omitempty"`
	ExpiredReason string       `json:"expired_reason,omitempty"`
}

// ControlOutcome answers one request of a control batch: its result, or
// the error that refused it, as for AckOutcome.
type ControlOutcome struct {
	Result ControlResult
	Err    error
	// Released is set when the request ended the lease (a NACK or a
	// reject): the connection's capacity slot is free (K-5).
	Released bool
}

// deliveryControlBatch records extensions, NACKs and rejects in one
// transaction (group commit, as deliveryAckBatch), in the order given, so
// that a NACK and a later request of the same batch see each other.
// Each is fenced like an ACK, and more: only a delivery still LEASED under
// the request's proof may be extended, NACKed or rejected; any other is
// ErrLeaseLost and changes nothing.
//
//   - Extend sets lease_until to now + ExtendBy, never earlier than it was,
//     and only while the lease has not run out (K-1); it keeps the epoch,
//     the attempts and the secret.
//   - Nack ends the lease: PENDING, available after Delay or the
//     subscription's retry policy, or EXPIRED ATTEMPTS_EXHAUSTED when no
//     attempt remains; nacks + 1; last_error = Reason (K-2).
//   - Reject ends the lease: EXPIRED REJECTED, last_error = Reason (K-3).
//
// A NACK or a reject clears the lease's digest, so the same proof can
// neither ACK nor do anything else afterwards. An error means nothing was
// recorded.
func deliveryControlBatch(ctx context.Context, pool *sql.DB, grants auth.GrantChecker, requests []*DeliveryControlParams) ([]ControlOutcome, error) {
	targets := make([]batchTarget, len(requests))
	for i, p := range requests {
		targets[i] = batchTarget{DeliveryID: p.DeliveryID, SubscriptionID: p.SubscriptionID, Grant: p.Grant}
	}
	var outcomes []ControlOutcome
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		outcomes = make([]ControlOutcome, len(requests))
		// Rows are locked in primary-key order, as ACK batches lock them.
		found, refused, locked, err := batchLock(ctx, tx, grants, targets)
		if err != nil {
			return err
		}
		subscriptionIDs := make([]string, 0, len(locked))
		for _, d := range locked {
			subscriptionIDs = append(subscriptionIDs, d.SubscriptionID)
		}
		var policies map[string]RetryPolicy
		now := db.Now()
		for i, p := range requests {
			d := found[i]
			switch {
			case refused[i] != nil:
				outcomes[i].Err = refused[i]
				continue
			case !proofMatches(d, p.Epoch, p.Secret) || d.State != stateLeased:
				outcomes[i].Err = ErrLeaseLost
				continue
			}
			switch p.Verb {
			case ControlExtend:
				if d.LeaseUntil == nil || !d.LeaseUntil.After(now) {
					outcomes[i].Err = ErrLeaseLost
					continue
				}
				if until := now.Add(p.ExtendBy); until.After(*d.LeaseUntil) {
					d.LeaseUntil = &until
				}
				_, err = tx.ExecContext(ctx, `UPDATE event_deliveries SET revision = revision + 1, lease_until = ? WHERE id = ?`,
					*d.LeaseUntil, d.ID)
			case ControlNack:
				d.Nacks++
				d.LastError = p.Reason
				if d.Attempts >= d.AttemptBudget {
					// A skip (K-9) may have named the reason already.
					d.State = stateExpired
					if d.ExpiredReason == "" {
						d.ExpiredReason = ExpiredAttemptsExhausted
					}
				} else {
					delay := time.Duration(0)
					if p.Delay != nil {
						delay = *p.Delay
					} else {
						if policies == nil {
							if policies, err = retryPolicies(ctx, tx, subscriptionIDs); err != nil {
								return err
							}
						}
						delay = policies[d.SubscriptionID].Delay(d.Attempts)
					}
					d.State, d.AvailableAt = statePending, now.Add(delay)
				}
				_, err = tx.ExecContext(ctx, `UPDATE event_deliveries SET state = ?, revision = revision + 1,
					lease_until = NULL, lease_session_id = NULL, lease_secret_digest = NULL, available_at = ?,
					expired_reason = NULLIF(?, ''), last_error = NULLIF(?, ''), nacks = nacks + 1 WHERE id = ?`,
					d.State, d.AvailableAt, d.ExpiredReason, d.LastError, d.ID)
			case ControlReject:
				d.State, d.ExpiredReason, d.LastError = stateExpired, ExpiredRejected, p.Reason
				_, err = tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'EXPIRED', revision = revision + 1,
					lease_until = NULL, lease_session_id = NULL, lease_secret_digest = NULL,
					expired_reason = ?, last_error = ? WHERE id = ?`, d.ExpiredReason, d.LastError, d.ID)
			default:
				return fmt.Errorf("unknown control verb %d", p.Verb)
			}
			if err != nil {
				return err
			}
			res := ControlResult{DeliveryID: d.ID, EventID: d.EventID, Epoch: httpx.Uint64(d.LeaseEpoch), State: d.State}
			switch d.State {
			case stateLeased:
				res.LeaseUntil = httpx.FormatTime(*d.LeaseUntil)
			case statePending:
				res.AvailableAt = httpx.FormatTime(d.AvailableAt)
			case stateExpired:
				res.ExpiredReason = d.ExpiredReason
			}
			if d.State != stateLeased {
				// The proof is spent: nothing else may use it.
				d.LeaseDigest, d.LeaseUntil = nil, nil
				outcomes[i].Released = true
			}
			outcomes[i].Result = res
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("subscriptions: control: %w", err)
	}
	return outcomes, nil
}
