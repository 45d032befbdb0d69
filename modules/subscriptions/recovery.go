package subscriptions

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Recovery of many deliveries at once (K-7, K-8, K-9). Each operation is
// guarded: its caller first counts what it matches (a dry run), then runs
// it with that count, which must still be what it matches when it runs;
// it changes at most maxBulk deliveries, all in one transaction, and
// leaves one audit record with its filter and count.

// Limits of bulk operations.
const (
	maxBulk    = 10_000
	sampleSize = 10
)

// Kinds of audited operations.
const (
	operationRetry  = "RETRY"
	operationReplay = "REPLAY"
	operationSkip   = "SKIP"
)

// deliveryFilter selects deliveries of one subscription in one state,
// optionally by expired_reason and within a sequence range.
type deliveryFilter struct {
	SubscriptionID string
	State          string
	ExpiredReason  string
	From, To       *uint64
}

// where returns the filter's condition and arguments. Its leading columns
// are those of the claim index (subscription_id, state, sequence).
func (f *deliveryFilter) where() (string, []any) {
	cond := `subscription_id = ? AND state = ?`
	args := []any{f.SubscriptionID, f.State}
	if f.From != nil {
		cond += ` AND sequence >= ?`
		args = append(args, *f.From)
	}
	if f.To != nil {
		cond += ` AND sequence <= ?`
		args = append(args, *f.To)
	}
	if f.ExpiredReason != "" {
		cond += ` AND expired_reason = ?`
		args = append(args, f.ExpiredReason)
	}
	return cond, args
}

// record is the filter as the audit keeps it.
func (f *deliveryFilter) record() map[string]any {
	m := map[string]any{"state": f.State}
	if f.ExpiredReason != "" {
		m["expired_reason"] = f.ExpiredReason
	}
	if f.From != nil {
		m["from_sequence"] = httpx.Uint64(*f.From)
	}
	if f.To != nil {
		m["to_sequence"] = httpx.Uint64(*f.To)
	}
	return m
}

// DryRun is what a dry run answers: how many deliveries the filter matches
// now, and the ids of the first sampleSize in sequence order.
type DryRun struct {
	Matched int      `json:"matched"`
	Sample  []string `json:"sample"`
}

// deliveryCount counts what f matches, without changing or locking
// anything. The count reads the claim index over the filter's range.
func deliveryCount(ctx context.Context, q Querier, f *deliveryFilter) (DryRun, error) {
	cond, args := f.where()
	var out DryRun
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_deliveries WHERE `+cond, args...).Scan(&out.Matched); err != nil {
		return out, fmt.Errorf("subscriptions: count deliveries: %w", err)
	}
	sample, err := db.QueryStrings(ctx, q, `SELECT id FROM event_deliveries WHERE `+cond+` ORDER BY sequence LIMIT ?`, append(args, sampleSize)...)
	if err != nil {
		return out, fmt.Errorf("subscriptions: count deliveries: %w", err)
	}
	out.Sample = append([]string{}, sample...)
	return out, nil
}

// bulkLock locks what f matches in tx, at most maxBulk+1 rows, and checks
// the guard: more than maxBulk is INVALID_ARGUMENT, a count other than
// expected STATE_CONFLICT naming the actual count. It returns the highest
// attempts and attempt_budget among the rows, for the budget checks. The
// rows stay locked, so an UPDATE with the same filter in tx changes exactly
// them.
func bulkLock(ctx context.Context, tx *sql.Tx, f *deliveryFilter, expected int) (maxAttempts, maxBudget int, err error) {
	cond, args := f.where()
	rows, err := tx.QueryContext(ctx, `SELECT attempts, attempt_budget FROM event_deliveries WHERE `+cond+`
		ORDER BY sequence LIMIT ? FOR UPDATE`, append(args, maxBulk+1)...)
	if err != nil {
		return 0, 0, fmt.Errorf("subscriptions: lock deliveries: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var attempts, budget int
		if err := rows.Scan(&attempts, &budget); err != nil {
			return 0, 0, fmt.Errorf("subscriptions: lock deliveries: %w", err)
		}
		n++
		maxAttempts, maxBudget = max(maxAttempts, attempts), max(maxBudget, budget)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("subscriptions: lock deliveries: %w", err)
	}
	if n > maxBulk {
		return 0, 0, httpx.Errorf(httpx.CodeInvalidArgument, "the filter matches more than %d deliveries; narrow it with from_sequence and to_sequence", maxBulk)
	}
	if n != expected {
		return 0, 0, httpx.Errorf(httpx.CodeStateConflict, "expected_count %d does not match the %d deliveries the filter matches now", expected, n)
	}
	return maxAttempts, maxBudget, nil
}

// Operation is the receipt of an audited bulk operation.
type Operation struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	Kind           string `json:"kind"`
	Count          int    `json:"count"`
	CreatedAt      string `json:"created_at"`
}

// operationRecord appends the audit record of an operation in tx.
func operationRecord(ctx context.Context, tx *sql.Tx, subscriptionID, credentialID, kind string, filter map[string]any, count int, reason string, now time.Time) (Operation, error) {
	f, err := json.Marshal(filter)
	if err != nil {
		return Operation{}, fmt.Errorf("subscriptions: audit %s: %w", kind, err)
	}
	op := Operation{ID: db.NewID(), SubscriptionID: subscriptionID, Kind: kind, Count: count, CreatedAt: httpx.FormatTime(now)}
	if _, err := tx.ExecContext(ctx, `INSERT INTO subscription_operations (id, subscription_id, credential_id, kind, filter, count, reason, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, op.ID, subscriptionID, credentialID, kind, f, count, reason, now); err != nil {
		return Operation{}, fmt.Errorf("subscriptions: audit %s: %w", kind, err)
	}
	return op, nil
}

// deliveryRetryBulkParams describe a guarded bulk retry (K-7).
type deliveryRetryBulkParams struct {
	Filter             deliveryFilter
	CredentialID       string
	ExpectedCount      int
	AdditionalAttempts int
	Reason             string
}

// deliveryRetryBulk makes the EXPIRED deliveries p.Filter matches PENDING
// again with p.AdditionalAttempts more attempts each, in tx, under the
// bulk guard (bulkLock) and the budget rule of a single retry (S-21): no
// budget may pass maxAttemptBudget. Ids, attempts, lease epochs and event
// identity are kept; expired_reason is cleared.
func deliveryRetryBulk(ctx context.Context, tx *sql.Tx, p *deliveryRetryBulkParams) (Operation, error) {
	if _, err := subscriptionLock(ctx, tx, p.Filter.SubscriptionID); err != nil {
		return Operation{}, err
	}
	_, maxBudget, err := bulkLock(ctx, tx, &p.Filter, p.ExpectedCount)
	if err != nil {
		return Operation{}, err
	}
	if maxBudget+p.AdditionalAttempts > maxAttemptBudget {
		return Operation{}, httpx.Errorf(httpx.CodeStateConflict, "the attempt budget of a matched delivery would exceed %d", maxAttemptBudget)
	}
	now := db.Now()
	if p.ExpectedCount > 0 {
		cond, args := p.Filter.where()
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'PENDING', revision = revision + 1,
			attempt_budget = attempt_budget + ?, available_at = ?, lease_until = NULL, expired_reason = NULL WHERE `+cond,
			append([]any{p.AdditionalAttempts, now}, args...)...); err != nil {
			return Operation{}, fmt.Errorf("subscriptions: bulk retry: %w", err)
		}
	}
	filter := p.Filter.record()
	filter["additional_attempts"] = p.AdditionalAttempts
	return operationRecord(ctx, tx, p.Filter.SubscriptionID, p.CredentialID, operationRetry, filter, p.ExpectedCount, p.Reason, now)
}

// checkReplayRange refuses a replay range outside the retained log:
// events below the retention mark are purged (410 EVENT_HISTORY_EXPIRED),
// and to must not pass the committed head.
func checkReplayRange(ctx context.Context, q Querier, log Log, s *Subscription, from, to uint64) error {
	stream, err := log.StreamGet(ctx, q, s.QueueID)
	if err != nil {
		return err
	}
	if from < stream.RetentionMark {
		return httpx.Errorf(httpx.CodeEventHistoryExpired, "events before %d were purged; the redelivery horizon is %d", stream.RetentionMark, stream.RetentionMark)
	}
	if to > stream.Head {
		return httpx.Errorf(httpx.CodeInvalidArgument, "to_sequence %d is after the queue's committed head %d", to, stream.Head)
	}
	return nil
}

// deliveryReplayParams describe a guarded replay of ACKED deliveries (K-8).
type deliveryReplayParams struct {
	Filter        deliveryFilter
	CredentialID  string
	ExpectedCount int
	Reason        string
}

// deliveryReplay re-opens the ACKED deliveries of p.Filter's range in tx
// (K-8): each becomes PENDING with its attempts kept and its budget
// topped up to the subscription's max_attempts from now; its lease epoch
// continues, and the proof that acknowledged it no longer holds (its
// digest is cleared), so only a new lease can acknowledge it again. The
// range must lie within the retained log (checkReplayRange).
func deliveryReplay(ctx context.Context, tx *sql.Tx, log Log, p *deliveryReplayParams) (Operation, error) {
	s, err := subscriptionLock(ctx, tx, p.Filter.SubscriptionID)
	if err != nil {
		return Operation{}, err
	}
	if err := checkReplayRange(ctx, tx, log, s, *p.Filter.From, *p.Filter.To); err != nil {
		return Operation{}, err
	}
	maxAttempts, _, err := bulkLock(ctx, tx, &p.Filter, p.ExpectedCount)
	if err != nil {
		return Operation{}, err
	}
	if maxAttempts+s.MaxAttempts > maxAttemptBudget {
		return Operation{}, httpx.Errorf(httpx.CodeStateConflict, "the attempt budget of a matched delivery would exceed %d", maxAttemptBudget)
	}
	now := db.Now()
	if p.ExpectedCount > 0 {
		cond, args := p.Filter.where()
		if _, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'PENDING', revision = revision + 1,
			attempt_budget = GREATEST(attempt_budget, attempts + ?), available_at = ?, acknowledged_at = NULL,
			lease_until = NULL, lease_session_id = NULL, lease_secret_digest = NULL, expired_reason = NULL WHERE `+cond,
			append([]any{s.MaxAttempts, now}, args...)...); err != nil {
			return Operation{}, fmt.Errorf("subscriptions: replay: %w", err)
		}
	}
	return operationRecord(ctx, tx, s.ID, p.CredentialID, operationReplay, p.Filter.record(), p.ExpectedCount, p.Reason, now)
}

// subscriptionSkipParams describe a skip (K-9). To nil means the queue's
// committed head.
type subscriptionSkipParams struct {
	ID               string
	CredentialID     string
	ExpectedRevision uint64
	To               *uint64
	Reason           string
}

// subscriptionSkip moves a subscription past the events up to p.To in tx
// (K-9): the cursor becomes max(cursor, to), never lower, so the unread
// events up to to are never materialised; PENDING deliveries at or below
// to become EXPIRED with expired_reason SKIPPED; LEASED ones keep their
// lease (their proof still acknowledges them) but their budget is cut to
// the attempts made and their expired_reason set to SKIPPED beforehand,
// so that when the lease runs out, or its consumer gives it back, they
// expire as SKIPPED instead of being delivered again. It is a configuration
// change: revisioned, recorded in subscription_changes, and audited with
// what it skipped. A skip that would leave the subscription behind the
// retention mark is EVENT_HISTORY_EXPIRED: it must go at least to the
// mark − 1.
func subscriptionSkip(ctx context.Context, tx *sql.Tx, log Log, p *subscriptionSkipParams) (*Subscription, Operation, error) {
	s, err := subscriptionLock(ctx, tx, p.ID)
	if err != nil {
		return nil, Operation{}, err
	}
	if s.Revision != p.ExpectedRevision {
		return nil, Operation{}, httpx.Errorf(httpx.CodeStateConflict, "expected_revision %d does not match the subscription's revision %d", p.ExpectedRevision, s.Revision)
	}
	stream, err := log.StreamGet(ctx, tx, s.QueueID)
	if err != nil {
		return nil, Operation{}, err
	}
	to := stream.Head
	if p.To != nil {
		to = *p.To
	}
	if to > stream.Head {
		return nil, Operation{}, httpx.Errorf(httpx.CodeInvalidArgument, "to_sequence %d is after the queue's committed head %d", to, stream.Head)
	}
	cursor := max(s.CursorSequence, to)
	if cursor < stream.Head && cursor+1 < stream.RetentionMark {
		return nil, Operation{}, httpx.Errorf(httpx.CodeEventHistoryExpired, "events before %d were purged; skip at least to %d", stream.RetentionMark, stream.RetentionMark-1)
	}
	res, err := tx.ExecContext(ctx, `UPDATE event_deliveries SET state = 'EXPIRED', expired_reason = '`+ExpiredSkipped+`', revision = revision + 1,
		lease_until = NULL WHERE subscription_id = ? AND state = 'PENDING' AND sequence <= ?`, s.ID, to)
	if err != nil {
		return nil, Operation{}, fmt.Errorf("subscriptions: skip: %w", err)
	}
	skipped, _ := res.RowsAffected()
	res, err = tx.ExecContext(ctx, `UPDATE event_deliveries SET attempt_budget = attempts, expired_reason = '`+ExpiredSkipped+`'
		WHERE subscription_id = ? AND state = 'LEASED' AND sequence <= ?`, s.ID, to)
	if err != nil {
		return nil, Operation{}, fmt.Errorf("subscriptions: skip: %w", err)
	}
	leased, _ := res.RowsAffected()
	now := db.Now()
	unread := cursor - s.CursorSequence
	s.Revision++
	s.CursorSequence = cursor
	s.UpdatedAt = now
	if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET revision = ?, cursor_sequence = ?, updated_at = ? WHERE id = ?`,
		s.Revision, s.CursorSequence, now, s.ID); err != nil {
		return nil, Operation{}, fmt.Errorf("subscriptions: skip: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO subscription_changes (id, subscription_id, credential_id, revision, enabled, reason, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, db.NewID(), s.ID, p.CredentialID, s.Revision, s.Enabled, p.Reason, now); err != nil {
		return nil, Operation{}, fmt.Errorf("subscriptions: audit skip: %w", err)
	}
	op, err := operationRecord(ctx, tx, s.ID, p.CredentialID, operationSkip, map[string]any{
		"to_sequence": httpx.Uint64(to), "cursor_before": httpx.Uint64(cursor - unread),
		"unread_events_skipped": httpx.Uint64(unread), "leased_not_redelivered": leased,
	}, int(skipped), p.Reason, now)
	if err != nil {
		return nil, Operation{}, err
	}
	return s, op, nil
}
