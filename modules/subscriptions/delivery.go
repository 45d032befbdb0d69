package subscriptions

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// The delivery state machine (seed 001 §4–§6):
//
//	PENDING --claim--> LEASED --ack--> ACKED
//	LEASED --lease ran out, attempts < budget--> PENDING (recovery, after the retry policy's delay)
//	LEASED --lease ran out, attempts = budget--> EXPIRED ATTEMPTS_EXHAUSTED (recovery)
//	LEASED --event.deliver never written--> PENDING, attempt given back
//	LEASED --extend--> LEASED, later lease_until
//	LEASED --nack, attempts < budget--> PENDING (after delay_ms or the retry policy's delay)
//	LEASED --nack, attempts = budget--> EXPIRED ATTEMPTS_EXHAUSTED
//	LEASED --reject--> EXPIRED REJECTED
//	EXPIRED --manual retry--> PENDING
//
// Every transition bumps the revision. The latest proof (epoch and secret)
// may still ACK after its lease ran out, from PENDING or EXPIRED, as long as
// no new lease replaced it (E-11). A NACK or a reject ends the proof: its
// digest is cleared, so the same proof can do nothing more (K-2, K-3).

// ErrLeaseLost answers an ACK with a superseded or wrong proof.
var ErrLeaseLost = httpx.Errorf(httpx.CodeDeliveryLeaseLost, "this proof does not hold the delivery's latest lease")

// ErrSessionClosed is DeliveryClaim's answer for a session that is closed
// while its connection still runs: the node serving it was taken for dead
// by another node, which closed its sessions (N-3). The connection must
// close so that its consumer reconnects.
var ErrSessionClosed = httpx.Errorf(httpx.CodeUnavailable, "this connection's session was closed because its node was taken for dead; reconnect")

// EventSessionOpenParams describe an event connection.
type EventSessionOpenParams struct {
	SubscriptionID string
	CredentialID   string
	// ApplicationID is the application of the credential; the session
	// counts against its connections (N-4).
	ApplicationID string
	Capacity      int
	// MaxPerApplication bounds the event connections of the application
	// open at once across every node (events.max_connections_per_app);
	// zero admits without counting, for callers that bound nothing.
	MaxPerApplication int
	// NodeID is the node serving the connection (modules.Env.NodeID).
	NodeID string
}

// ErrApplicationConnections is returned by EventSessionOpen when the
// application already has MaxPerApplication event connections open.
var ErrApplicationConnections = errors.New("subscriptions: the application is at its limit of event connections")

// EventSessionOpen records an event connection and returns its session id.
// With p.MaxPerApplication set, it first locks the application with apps
// and counts its open event sessions in the same transaction, so that no
// two nodes admit the same last slot (N-4); at the limit it records nothing
// and returns ErrApplicationConnections. A session whose COMMIT outcome is
// unknown is closed again before the error is returned, so that it never
// holds a slot nobody uses.
func EventSessionOpen(ctx context.Context, pool *sql.DB, apps auth.ApplicationLocker, p *EventSessionOpenParams) (string, error) {
	id := db.NewID()
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		if p.MaxPerApplication > 0 {
			if err := apps.ApplicationLock(ctx, tx, p.ApplicationID); err != nil {
				return err
			}
			var open int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE application_id = ? AND closed_at IS NULL`,
				p.ApplicationID).Scan(&open); err != nil {
				return err
			}
			if open >= p.MaxPerApplication {
				return ErrApplicationConnections
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO event_sessions (id, subscription_id, credential_id, application_id, capacity, connected_at, node_id)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, id, p.SubscriptionID, p.CredentialID, p.ApplicationID, p.Capacity, db.Now(), p.NodeID)
		return err
	})
	if errors.Is(err, db.ErrCommitUnknown) {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unknownCommitCloseTimeout)
		_ = EventSessionClose(closeCtx, pool, id)
		cancel()
	}
	if err != nil {
		return "", fmt.Errorf("subscriptions: open event session: %w", err)
	}
	return id, nil
}

// unknownCommitCloseTimeout bounds the close of a session whose COMMIT
// outcome was unknown.
const unknownCommitCloseTimeout = 5 * time.Second

// EventSessionClose marks an event connection closed. Its leases stay (E-5,
// E-16): they expire or are ACKed with their proofs from another connection.
func EventSessionClose(ctx context.Context, pool *sql.DB, sessionID string) error {
	_, err := pool.ExecContext(ctx, `UPDATE event_sessions SET closed_at = ? WHERE id = ? AND closed_at IS NULL`, db.Now(), sessionID)
	if err != nil {
		return fmt.Errorf("subscriptions: close event session: %w", err)
	}
	return nil
}

// DeliveryRecover moves up to batch LEASED deliveries of a subscription whose
// lease ran out to PENDING, or to EXPIRED when their attempts reached the
// budget (E-8, S-22). Claims call it for their subscription; the background
// sweeper calls it for all with subscriptionID "", which recovers up to
// batch per group of sweepGroup subscriptions. It returns how many it
// recovered.
func DeliveryRecover(ctx context.Context, pool *sql.DB, subscriptionID string, batch int) (int, error) {
	groups := [][]string{{subscriptionID}}
	if subscriptionID == "" {
		ids, err := db.QueryStrings(ctx, pool, `SELECT id FROM subscriptions ORDER BY id`)
		if err != nil {
			return 0, fmt.Errorf("subscriptions: recover leases: %w", err)
		}
		groups = nil
		for group := range slices.Chunk(ids, sweepGroup) {
			groups = append(groups, group)
		}
	}
	total := 0
	for _, group := range groups {
		n := 0
		err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
			var err error
			n, err = recoverLeases(ctx, tx, group, batch, db.Now())
			return err
		})
		if err != nil {
			return total, fmt.Errorf("subscriptions: recover leases: %w", err)
		}
		total += n
	}
	return total, nil
}

// sweepGroup is how many subscriptions one sweeper transaction covers.
const sweepGroup = 100

// recoverLeases recovers expired leases of the given subscriptions. It
// reads only their LEASED deliveries, through the claim index: as many as
// the connections' capacities, never the whole table. A recovered delivery
// keeps last_error LEASE_EXPIRED; one with attempts left becomes PENDING,
// available after its subscription's retry policy's delay counted from
// the moment its lease ran out (K-4), and never before now; one without
// becomes EXPIRED with expired_reason ATTEMPTS_EXHAUSTED.
func recoverLeases(ctx context.Context, tx *sql.Tx, subscriptionIDs []string, batch int, now time.Time) (int, error) {
	query := `SELECT id, subscription_id, attempts, attempts >= attempt_budget, lease_until FROM event_deliveries
		WHERE subscription_id IN (` + db.Placeholders(len(subscriptionIDs)) + `) AND state = 'LEASED' AND lease_until < ?`
	args := make([]any, 0, len(subscriptionIDs)+2)
	for _, id := range subscriptionIDs {
		args = append(args, id)
	}
	args = append(args, now)
	rows, err := tx.QueryContext(ctx, query+` LIMIT ? FOR UPDATE SKIP LOCKED`, append(args, batch)...)
	if err != nil {
		return 0, err
	}
	type expiredLease struct {
		id, subscriptionID string
		attempts           int
		until              time.Time
	}
	var toPending []expiredLease
	var toExpired []any
	expiredBySubscription := map[string]int{}
	for rows.Next() {
		var l expiredLease
		var exhausted bool
		if err := rows.Scan(&l.id, &l.subscriptionID, &l.attempts, &exhausted, &l.until); err != nil {
			rows.Close()
			return 0, err
		}
		expiredBySubscription[l.subscriptionID]++
		if exhausted {
			toExpired = append(toExpired, l.id)
		} else {
			toPending = append(toPending, l)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(toPending) > 0 {
		var ids []string
		for _, l := range toPending {
			ids = append(ids, l.subscriptionID)
		}
		policies, err := retryPolicies(ctx, tx, ids)
		if err != nil {
			return 0, err
		}
		cases := make([]any, 0, 2*len(toPending))
		pendingIDs := make([]any, 0, len(toPending))
		for _, l := range toPending {
			available := l.until.Add(policies[l.subscriptionID].Delay(l.attempts))
			if available.Before(now) {
				available = now
			}
			cases = append(cases, l.id, available)
			pendingIDs = append(pendingIDs, l.id)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'PENDING', revision = revision + 1,
			lease_until = NULL, lease_session_id = NULL, last_error = '`+LastErrorLeaseExpired+`',
			available_at = `+db.CaseByID(len(toPending))+`
			WHERE id IN (`+db.Placeholders(len(toPending))+`)`,
			append(cases, pendingIDs...)...); err != nil {
			return 0, err
		}
	}
	if len(toExpired) > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'EXPIRED', revision = revision + 1,
			lease_until = NULL, lease_session_id = NULL, expired_reason = COALESCE(expired_reason, '`+ExpiredAttemptsExhausted+`'),
			last_error = '`+LastErrorLeaseExpired+`' WHERE id IN (`+db.Placeholders(len(toExpired))+`)`, toExpired...); err != nil {
			return 0, err
		}
	}
	leaseExpiredOnCommit(ctx, tx, expiredBySubscription)
	return len(toPending) + len(toExpired), nil
}

// retryPolicies reads the retry policies of subscriptions, by id, without
// locking them.
func retryPolicies(ctx context.Context, q Querier, subscriptionIDs []string) (map[string]RetryPolicy, error) {
	slices.Sort(subscriptionIDs)
	subscriptionIDs = slices.Compact(subscriptionIDs)
	args := db.Args(subscriptionIDs)
	rows, err := q.QueryContext(ctx, `SELECT id, retry_initial_delay_ms, retry_max_delay_ms, retry_multiplier FROM subscriptions
		WHERE id IN (`+db.Placeholders(len(args))+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]RetryPolicy, len(args))
	for rows.Next() {
		var id string
		var p RetryPolicy
		if err := rows.Scan(&id, &p.InitialDelayMS, &p.MaxDelayMS, &p.Multiplier); err != nil {
			return nil, err
		}
		out[id] = p
	}
	return out, rows.Err()
}

// Lease is one delivery leased to an event connection, with what
// event.deliver carries.
type Lease struct {
	Delivery *Delivery
	Event    tasks.Event
	Secret   string
}

// DeliveryClaimParams describe a claim for one event connection.
type DeliveryClaimParams struct {
	SessionID string
	// Grant is what the session's credential must still hold: checked in
	// the claim's transaction, so a revocation stops leasing at once.
	Grant         auth.Grant
	LeaseDuration time.Duration
	// RecoverBatch bounds the expired leases a claim recovers.
	RecoverBatch int
}

// DeliveryClaim leases PENDING deliveries of the session's subscription up to the
// session's free capacity (E-4, E-7, E-8). Capacity is counted against the
// session row locked in the same transaction, so it holds across nodes;
// SKIP LOCKED lets many connections claim from one subscription without
// ever leasing a delivery twice. When PENDING deliveries do not fill the
// free capacity, expired leases of the subscription are recovered and
// leased in the same transaction. The leases are committed before DeliveryClaim
// returns, so the caller sends event.deliver only for persisted leases. A
// paused subscription gets nothing, a closed session ErrSessionClosed. p.Grant is
// checked with grants (the admin module's) in the same transaction: when it
// no longer holds, the error is that of grants.CheckGrants, and nothing is
// leased.
func DeliveryClaim(ctx context.Context, pool *sql.DB, log Log, grants auth.GrantChecker, p *DeliveryClaimParams) ([]Lease, error) {
	leases, _, err := deliveryClaim(ctx, pool, log, grants, nil, p)
	return leases, err
}

// deliveryClaim is DeliveryClaim, looking up PENDING deliveries from the
// subscription's claim floor when floors has one (claimFloors). It also
// reports whether the session's capacity is taken: it had no free slot, or
// the claim filled them all. Otherwise the claim leased everything it
// could: until more deliveries become claimable, a slot freed later finds
// nothing.
func deliveryClaim(ctx context.Context, pool *sql.DB, log Log, grants auth.GrantChecker, floors *claimFloors, p *DeliveryClaimParams) (leases []Lease, full bool, err error) {
	var (
		subscriptionID string
		filledAbove    uint64 // the floor this claim leaves; 0 for none
		recovered      bool   // it made deliveries PENDING again
		looked         bool   // it looked up PENDING deliveries
		token          uint64 // of floors, read before the look-up
	)
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		leases, filledAbove, recovered, looked, full = nil, 0, false, false, false
		var capacity, held int
		var closed sql.NullTime
		var enabled sql.NullBool
		var queueID sql.NullString
		// One round trip locks the session and reads, without locking
		// them, its subscription's state and the leases it holds, once
		// the session's lock is granted: the count sees every lease
		// committed by the transaction that held the lock before.
		err := tx.QueryRowContext(ctx, `SELECT e.subscription_id, e.capacity, e.closed_at,
			(SELECT s.enabled FROM subscriptions s WHERE s.id = e.subscription_id),
			(SELECT s.queue_id FROM subscriptions s WHERE s.id = e.subscription_id),
			(SELECT COUNT(*) FROM event_deliveries d WHERE d.lease_session_id = e.id AND d.state = 'LEASED')
			FROM event_sessions e WHERE e.id = ? FOR UPDATE`, p.SessionID).
			Scan(&subscriptionID, &capacity, &closed, &enabled, &queueID, &held)
		if err != nil {
			return err
		}
		if closed.Valid {
			return ErrSessionClosed
		}
		denied, err := grants.CheckGrants(ctx, tx, []auth.Grant{p.Grant})
		if err != nil {
			return err
		}
		if denied[0] != nil {
			return denied[0]
		}
		if !queueID.Valid {
			return ErrSubscriptionDeleted
		}
		if !enabled.Bool {
			return nil
		}
		now := db.Now()
		free := capacity - held
		full = free <= 0
		if full {
			// A full connection leases nothing, but its claim still
			// recovers expired leases for the others.
			n, err := recoverLeases(ctx, tx, []string{subscriptionID}, p.RecoverBatch, now)
			recovered = n > 0
			return err
		}
		var floor uint64
		floor, token = floors.get(subscriptionID, time.Now())
		looked = true
		picked, err := pickPending(ctx, tx, subscriptionID, now, free, floor, nil)
		if err != nil {
			return err
		}
		if len(picked) == free {
			filledAbove = picked[len(picked)-1].Sequence
		} else if floor > 0 {
			// Deliveries below the floor may have become claimable since
			// it was set.
			more, err := pickPending(ctx, tx, subscriptionID, now, free-len(picked), 0, picked)
			if err != nil {
				return err
			}
			if len(more) == free-len(picked) {
				filledAbove = more[len(more)-1].Sequence
			}
			picked = append(picked, more...)
		}
		// Expired leases are recovered here only when PENDING deliveries
		// do not fill the free capacity: with a backlog, the background
		// sweeper recovers them (S-22) and they are claimed in sequence
		// order among the others; without one, this claim re-leases them
		// at once.
		if len(picked) < free {
			n, err := recoverLeases(ctx, tx, []string{subscriptionID}, p.RecoverBatch, now)
			if err != nil {
				return err
			}
			if n > 0 {
				recovered = true
				more, err := pickPending(ctx, tx, subscriptionID, now, free-len(picked), 0, picked)
				if err != nil {
					return err
				}
				picked = append(picked, more...)
			}
		}
		slices.SortFunc(picked, func(a, b *Delivery) int { return cmp.Compare(a.Sequence, b.Sequence) })
		full = len(picked) == free
		if len(picked) == 0 {
			return nil
		}
		// One statement leases every picked delivery; each gets its own
		// secret, so only the digest differs per row.
		until := now.Add(p.LeaseDuration)
		secrets := make([]string, len(picked))
		digests := make([]any, 0, 2*len(picked))
		ids := make([]any, 0, len(picked))
		sequences := make([]uint64, 0, len(picked))
		for i, d := range picked {
			secret, digest := auth.NewLeaseSecret()
			secrets[i] = secret
			d.State = stateLeased
			d.Revision++
			d.LeaseEpoch++
			d.Attempts++
			d.LeaseUntil = &until
			d.LeaseDigest = digest[:]
			d.LeaseSession = p.SessionID
			digests = append(digests, d.ID, d.LeaseDigest)
			ids = append(ids, d.ID)
			sequences = append(sequences, d.Sequence)
		}
		args := append([]any{until, p.SessionID, now}, digests...)
		args = append(args, ids...)
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'LEASED', revision = revision + 1,
			lease_epoch = lease_epoch + 1, attempts = attempts + 1, lease_until = ?, lease_session_id = ?, leased_at = ?,
			lease_secret_digest = `+db.CaseByID(len(picked))+`
			WHERE id IN (`+db.Placeholders(len(picked))+`)`, args...); err != nil {
			return err
		}
		events, err := log.EventsBySequence(ctx, tx, queueID.String, sequences)
		if err != nil {
			return err
		}
		for i, d := range picked {
			ev, ok := events[d.Sequence]
			if !ok || ev.ID != d.EventID {
				return fmt.Errorf("event %s of delivery %s: %w", d.EventID, d.ID, sql.ErrNoRows)
			}
			leases = append(leases, Lease{Delivery: d, Event: ev, Secret: secrets[i]})
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSubscriptionDeleted) && subscriptionID != "" {
			floors.drop(subscriptionID)
		}
		return nil, false, fmt.Errorf("subscriptions: claim: %w", err)
	}
	if recovered {
		floors.forget(subscriptionID)
	} else if looked {
		floors.set(subscriptionID, filledAbove, token, time.Now())
	}
	return leases, full, nil
}

// deliveryUnsent gives back a lease whose event.deliver was never written
// to the connection, because the frame could not be encoded or the
// connection was closing. No consumer saw the delivery, so the lease does
// not count against the attempt budget: the delivery goes back to PENDING
// with its attempts as before the claim, available after delay, so that
// one whose frame can never be built is not claimed in a loop. Only the
// lease l still holds is given back; calling it twice, or after the lease
// was recovered or replaced, changes nothing. It reports whether it gave
// the lease back.
func deliveryUnsent(ctx context.Context, pool *sql.DB, l *Lease, delay time.Duration) (bool, error) {
	d := l.Delivery
	res, err := pool.ExecContext(ctx, `UPDATE event_deliveries SET state = 'PENDING', revision = revision + 1,
		attempts = attempts - 1, lease_until = NULL, lease_session_id = NULL, available_at = ?
		WHERE id = ? AND state = 'LEASED' AND lease_epoch = ? AND lease_session_id = ?`,
		db.Now().Add(delay), d.ID, d.LeaseEpoch, d.LeaseSession)
	if err != nil {
		return false, fmt.Errorf("subscriptions: delivery unsent: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("subscriptions: delivery unsent: %w", err)
	}
	return n == 1, nil
}

// pickPending locks up to limit PENDING deliveries of a subscription that
// are available now, in sequence order from above (exclusive), skipping
// those other claims hold and those this claim picked before (still
// PENDING until it leases them).
func pickPending(ctx context.Context, tx *sql.Tx, subscriptionID string, now time.Time, limit int, above uint64, picked []*Delivery) ([]*Delivery, error) {
	query := `SELECT ` + deliveryColumns + ` FROM event_deliveries
		WHERE subscription_id = ? AND state = 'PENDING' AND sequence > ? AND available_at <= ?`
	args := []any{subscriptionID, above, now}
	if len(picked) > 0 {
		query += ` AND id NOT IN (` + db.Placeholders(len(picked)) + `)`
		for _, d := range picked {
			args = append(args, d.ID)
		}
	}
	return queryDeliveries(ctx, tx, query+` ORDER BY sequence LIMIT ? FOR UPDATE SKIP LOCKED`, append(args, limit)...)
}

// DeliveryAckParams are one event.ack.
type DeliveryAckParams struct {
	// Grant is what the ACK's credential must still hold (see DeliveryClaim).
	Grant          auth.Grant
	SubscriptionID string
	DeliveryID     string
	Epoch          uint64
	Secret         string
	SessionID      string
}

// AckResult is what the ack frame answers (E-9, E-10).
type AckResult struct {
	DeliveryID     string       `json:"delivery_id"`
	EventID        string       `json:"event_id"`
	Epoch          httpx.Uint64 `json:"epoch"`
	AcknowledgedAt string       `json:"acknowledged_at"`
	Deduplicated   bool         `json:"deduplicated"`
}

// deliveryAck acknowledges one delivery; see DeliveryAckBatch.
func deliveryAck(ctx context.Context, pool *sql.DB, grants auth.GrantChecker, p *DeliveryAckParams) (AckResult, error) {
	outcomes, err := deliveryAckBatch(ctx, pool, grants, []*DeliveryAckParams{p})
	if err != nil {
		return AckResult{}, err
	}
	return outcomes[0].Result, outcomes[0].Err
}

// errDeliveryNotFound answers an ACK for a delivery that does not exist or
// belongs to another subscription than the connection's (seed 001 §7:
// NOT_FOUND, and the connection closes).
var errDeliveryNotFound = auth.ErrNotFound("delivery")

// AckOutcome answers one ACK of a batch: its result, or the error that
// refused it: ErrLeaseLost, ErrDeliveryNotFound, or an error of
// auth.GrantChecker.CheckGrants.
type AckOutcome struct {
	Result AckResult
	Err    error
}

// deliveryAckBatch acknowledges deliveries with their latest proofs (E-9 … E-11),
// all in one transaction, so that ACKs arriving together share one commit
// (group commit); nothing is answered before that commit. Each ACK is
// judged on its own: the first time a proof matches, the delivery becomes
// ACKED, leaving the backlog, with one audit record; the same proof again,
// in this batch or later, returns the original acknowledged_at with
// Deduplicated and changes nothing; a superseded or wrong proof is
// ErrLeaseLost in its outcome, a delivery outside the ACK's subscription
// ErrDeliveryNotFound, and an ACK whose grant no longer holds, checked
// with grants in the same transaction, gets the error of
// grants.CheckGrants. An error means nothing was recorded.
func deliveryAckBatch(ctx context.Context, pool *sql.DB, grants auth.GrantChecker, acks []*DeliveryAckParams) ([]AckOutcome, error) {
	targets := make([]batchTarget, len(acks))
	for i, p := range acks {
		targets[i] = batchTarget{DeliveryID: p.DeliveryID, SubscriptionID: p.SubscriptionID, Grant: p.Grant}
	}
	var outcomes []AckOutcome
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		outcomes = make([]AckOutcome, len(acks))
		found, refused, _, err := batchLock(ctx, tx, grants, targets)
		if err != nil {
			return err
		}
		now := db.Now()
		var acked []*Delivery
		var sessions []string
		for i, p := range acks {
			d := found[i]
			switch {
			case refused[i] != nil:
				outcomes[i].Err = refused[i]
				continue
			case !proofHolds(d, p):
				outcomes[i].Err = ErrLeaseLost
				continue
			}
			res := AckResult{DeliveryID: d.ID, EventID: d.EventID, Epoch: httpx.Uint64(d.LeaseEpoch)}
			if d.State == StateAcked {
				res.AcknowledgedAt = httpx.FormatTime(*d.AcknowledgedAt)
				res.Deduplicated = true
			} else {
				d.State = StateAcked
				d.AcknowledgedAt = &now
				res.AcknowledgedAt = httpx.FormatTime(now)
				acked = append(acked, d)
				sessions = append(sessions, p.SessionID)
			}
			outcomes[i].Result = res
		}
		if len(acked) == 0 {
			return nil
		}
		ackedIDs := make([]any, 0, len(acked))
		values := make([]string, 0, len(acked))
		audit := make([]any, 0, 5*len(acked))
		for i, d := range acked {
			ackedIDs = append(ackedIDs, d.ID)
			values = append(values, "(?, ?, ?, ?, ?)")
			audit = append(audit, d.ID, d.SubscriptionID, d.LeaseEpoch, sessions[i], now)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'ACKED', revision = revision + 1,
			acknowledged_at = ?, lease_until = NULL WHERE id IN (`+db.Placeholders(len(acked))+`)`,
			append([]any{now}, ackedIDs...)...); err != nil {
			return err
		}
		// A replayed delivery (K-8) is acknowledged again: its record
		// then holds the latest ACK.
		_, err = tx.ExecContext(ctx, `INSERT INTO delivery_acks (delivery_id, subscription_id, epoch, session_id, acknowledged_at)
			VALUES `+strings.Join(values, ", ")+` ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), session_id = VALUES(session_id),
			acknowledged_at = VALUES(acknowledged_at)`, audit...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("subscriptions: ack: %w", err)
	}
	return outcomes, nil
}

// batchTarget is what one request of a batch on deliveries (ACKs, control
// requests) names: the delivery, the subscription of the connection it
// came on, and the grant it holds.
type batchTarget struct {
	DeliveryID     string
	SubscriptionID string
	Grant          auth.Grant
}

// batchLock locks the deliveries that targets name, in primary-key order
// (the same in every batch, so that batches do not deadlock), and checks
// the targets' grants with grants in tx. For each target, in order, it
// returns its delivery in found, or in refused the error that refuses it:
// the grant's error of grants.CheckGrants, or errDeliveryNotFound when the
// delivery does not exist or belongs to another subscription. locked holds
// every row locked. An error means the batch cannot be judged.
func batchLock(ctx context.Context, tx *sql.Tx, grants auth.GrantChecker, targets []batchTarget) (found []*Delivery, refused []error, locked []*Delivery, err error) {
	ids := make([]string, 0, len(targets))
	for _, t := range targets {
		ids = append(ids, t.DeliveryID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	args := db.Args(ids)
	locked, err = queryDeliveries(ctx, tx, `SELECT `+deliveryColumns+` FROM event_deliveries
		WHERE id IN (`+db.Placeholders(len(ids))+`) ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return nil, nil, nil, err
	}
	byID := make(map[string]*Delivery, len(locked))
	for _, d := range locked {
		byID[d.ID] = d
	}
	held := make([]auth.Grant, len(targets))
	for i, t := range targets {
		held[i] = t.Grant
	}
	denied, err := grants.CheckGrants(ctx, tx, held)
	if err != nil {
		return nil, nil, nil, err
	}
	found = make([]*Delivery, len(targets))
	refused = make([]error, len(targets))
	for i, t := range targets {
		d := byID[t.DeliveryID]
		switch {
		case denied[i] != nil:
			refused[i] = denied[i]
		case d == nil || d.SubscriptionID != t.SubscriptionID:
			refused[i] = errDeliveryNotFound
		default:
			found[i] = d
		}
	}
	return found, refused, locked, nil
}

// proofHolds reports whether an ACK's epoch and secret are the delivery's
// latest lease, comparing the secret's digest in constant time.
func proofHolds(d *Delivery, p *DeliveryAckParams) bool {
	return proofMatches(d, p.Epoch, p.Secret)
}

// proofMatches reports whether epoch and secret are the delivery's latest
// lease, comparing the secret's digest in constant time. A spent proof (a
// NACK or a reject cleared the digest) matches nothing.
func proofMatches(d *Delivery, epoch uint64, secret string) bool {
	digest := sha256.Sum256([]byte(secret))
	matches := len(d.LeaseDigest) == len(digest) && subtle.ConstantTimeCompare(d.LeaseDigest, digest[:]) == 1
	return matches && d.LeaseEpoch != 0 && d.LeaseEpoch == epoch
}
