package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Querier is a pool or a transaction.
type Querier = tasks.Querier

const subscriptionColumns = `s.id, s.namespace_id, s.queue_id, s.credential_id, s.name, s.revision, s.enabled, s.types,
	s.cursor_sequence, s.max_pending, s.max_attempts, s.created_at, s.updated_at,
	s.retry_initial_delay_ms, s.retry_max_delay_ms, s.retry_multiplier, ` + backlogOfS

// backlogOfS counts the live deliveries (PENDING, LEASED, EXPIRED) of the
// subscription s of the enclosing query: its pending_count. One count per
// state, because a subquery that depends on s can look up the claim index
// by (subscription_id, state) only with one state at a time; with
// `state IN (…)` it reads every delivery of the subscription, ACKED ones
// included, and grows with the subscription's history. The index is named:
// with the statistics of a busy table the optimizer sometimes looked up
// another index by subscription_id alone, with the same effect.
const backlogOfS = `((SELECT COUNT(*) FROM event_deliveries d FORCE INDEX (ix_event_deliveries_claim_order)
		WHERE d.subscription_id = s.id AND d.state = 'PENDING')
	+ (SELECT COUNT(*) FROM event_deliveries d FORCE INDEX (ix_event_deliveries_claim_order)
		WHERE d.subscription_id = s.id AND d.state = 'LEASED')
	+ (SELECT COUNT(*) FROM event_deliveries d FORCE INDEX (ix_event_deliveries_claim_order)
		WHERE d.subscription_id = s.id AND d.state = 'EXPIRED'))`

type scanner = db.Scanner

func scanSubscription(row scanner) (*Subscription, error) {
	var (
		s     Subscription
		types string
	)
	err := row.Scan(&s.ID, &s.NamespaceID, &s.QueueID, &s.CredentialID, &s.Name, &s.Revision, &s.Enabled, &types,
		&s.CursorSequence, &s.MaxPending, &s.MaxAttempts, &s.CreatedAt, &s.UpdatedAt,
		&s.RetryPolicy.InitialDelayMS, &s.RetryPolicy.MaxDelayMS, &s.RetryPolicy.Multiplier, &s.PendingCount)
	if err != nil {
		return nil, err
	}
	s.Types = splitTypes(types)
	return &s, nil
}

// subscriptionGet returns a subscription with its current backlog, or
// sql.ErrNoRows.
func subscriptionGet(ctx context.Context, q Querier, id string) (*Subscription, error) {
	s, err := scanSubscription(q.QueryRowContext(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions s WHERE s.id = ?`, id))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("subscriptions: get: %w", err)
	}
	return s, err
}

// subscriptionLock reads a subscription FOR UPDATE inside tx. The lock
// serialises materialisation and configuration of one subscription.
func subscriptionLock(ctx context.Context, tx *sql.Tx, id string) (*Subscription, error) {
	s, err := scanSubscription(tx.QueryRowContext(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions s WHERE s.id = ? FOR UPDATE`, id))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("subscriptions: lock: %w", err)
	}
	return s, err
}

// subscriptionCreateParams describe a new subscription. FromSequence nil
// means "after the head committed now".
type subscriptionCreateParams struct {
	NamespaceID  string
	QueueID      string
	CredentialID string
	Name         string
	Types        []string
	FromSequence *uint64
	MaxPending   int
	MaxAttempts  int
	RetryPolicy  RetryPolicy
}

// subscriptionCreate stores a new subscription in tx (S-4 … S-11). The
// namespace row is locked so that the 64-per-namespace limit and the name's
// uniqueness hold under concurrent creates.
func subscriptionCreate(ctx context.Context, tx *sql.Tx, log Log, p *subscriptionCreateParams) (*Subscription, error) {
	var nsID string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM namespaces WHERE id = ? FOR UPDATE`, p.NamespaceID).Scan(&nsID); err != nil {
		return nil, fmt.Errorf("subscriptions: lock namespace: %w", err)
	}
	var count, sameName int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(name = ?), 0) FROM subscriptions WHERE namespace_id = ?`, p.Name, p.NamespaceID).
		Scan(&count, &sameName); err != nil {
		return nil, fmt.Errorf("subscriptions: count: %w", err)
	}
	if sameName > 0 {
		return nil, httpx.Errorf(httpx.CodeStateConflict, "a subscription named %q already exists in this namespace", p.Name)
	}
	if count >= maxSubscriptionsPerNamespace {
		return nil, httpx.Errorf(httpx.CodeSubscriptionLimit, "the namespace already has %d subscriptions", maxSubscriptionsPerNamespace)
	}
	types, err := normalizeTypes(p.Types)
	if err != nil {
		return nil, err
	}
	stream, err := log.StreamGet(ctx, tx, p.QueueID)
	if err != nil {
		return nil, err
	}
	cursor := stream.Head
	if p.FromSequence != nil {
		from := *p.FromSequence
		switch {
		case from > stream.Head:
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "from_sequence %d is after the queue's committed head %d", from, stream.Head)
		case from == 0:
			cursor = stream.RetentionMark - 1
		case from+1 < stream.RetentionMark:
			return nil, httpx.Errorf(httpx.CodeEventHistoryExpired, "events after from_sequence %d were purged; the oldest retained is %d", from, stream.RetentionMark)
		default:
			cursor = from
		}
	}
	now := db.Now()
	s := &Subscription{
		ID: db.NewID(), NamespaceID: p.NamespaceID, QueueID: p.QueueID, CredentialID: p.CredentialID, Name: p.Name,
		Revision: 1, Enabled: true, Types: types, CursorSequence: cursor, MaxPending: p.MaxPending,
		MaxAttempts: p.MaxAttempts, RetryPolicy: p.RetryPolicy, CreatedAt: now, UpdatedAt: now,
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO subscriptions (id, namespace_id, queue_id, credential_id, name, revision, enabled, types,
			cursor_sequence, max_pending, max_attempts, retry_initial_delay_ms, retry_max_delay_ms, retry_multiplier,
			created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 1, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.NamespaceID, s.QueueID, s.CredentialID, s.Name, joinTypes(s.Types), s.CursorSequence,
		s.MaxPending, s.MaxAttempts, s.RetryPolicy.InitialDelayMS, s.RetryPolicy.MaxDelayMS, s.RetryPolicy.Multiplier, now, now)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: insert: %w", err)
	}
	return s, nil
}

// subscriptionListParams page the caller's subscriptions on a queue.
type subscriptionListParams struct {
	QueueID      string
	CredentialID string
	httpx.ListPage
}

// subscriptionList returns up to p.Limit+1 subscriptions, newest first.
func subscriptionList(ctx context.Context, q Querier, p *subscriptionListParams) ([]*Subscription, error) {
	out, err := httpx.ListRows(ctx, q, scanSubscription, `SELECT `+subscriptionColumns+` FROM subscriptions s WHERE s.queue_id = ? AND s.credential_id = ?`,
		[]any{p.QueueID, p.CredentialID}, "s.", "", p.ListPage)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: list: %w", err)
	}
	return out, nil
}

// subscriptionConfigureParams change a subscription's enabled flag and,
// when RetryPolicy is set, its retry policy.
type subscriptionConfigureParams struct {
	ID               string
	CredentialID     string
	ExpectedRevision uint64
	Enabled          bool
	RetryPolicy      *RetryPolicy
	Reason           string
}

// subscriptionConfigure sets enabled, and the retry policy when given, in
// tx (S-14, S-15, K-4): every command, even one that sets the same value,
// is an audited change that increases the revision. A stale
// expected_revision is a STATE_CONFLICT. A change of the retry policy is
// also written to the audit log with aud, naming the revision and the new
// policy; the reason is in the revision's subscription_changes row.
func subscriptionConfigure(ctx context.Context, tx *sql.Tx, aud audit.Writer, p *subscriptionConfigureParams) (*Subscription, error) {
	s, err := subscriptionLock(ctx, tx, p.ID)
	if err != nil {
		return nil, err
	}
	if s.Revision != p.ExpectedRevision {
		return nil, httpx.Errorf(httpx.CodeStateConflict, "expected_revision %d does not match the subscription's revision %d", p.ExpectedRevision, s.Revision)
	}
	now := db.Now()
	s.Revision++
	s.Enabled = p.Enabled
	s.UpdatedAt = now
	if p.RetryPolicy != nil {
		s.RetryPolicy = *p.RetryPolicy
	}
	if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET revision = ?, enabled = ?, updated_at = ?,
		retry_initial_delay_ms = ?, retry_max_delay_ms = ?, retry_multiplier = ? WHERE id = ?`,
		s.Revision, s.Enabled, now, s.RetryPolicy.InitialDelayMS, s.RetryPolicy.MaxDelayMS, s.RetryPolicy.Multiplier, s.ID); err != nil {
		return nil, fmt.Errorf("subscriptions: configure: %w", err)
	}
	if p.RetryPolicy != nil {
		if err := aud.Audit(ctx, tx, audit.Record{
			NamespaceID: s.NamespaceID, CredentialID: p.CredentialID, Action: "subscription.retry_policy", SubjectID: s.ID,
			Reason: fmt.Sprintf("revision %d: initial_delay_ms %d, max_delay_ms %d, multiplier %g",
				s.Revision, s.RetryPolicy.InitialDelayMS, s.RetryPolicy.MaxDelayMS, s.RetryPolicy.Multiplier),
		}); err != nil {
			return nil, fmt.Errorf("subscriptions: audit retry policy: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO subscription_changes (id, subscription_id, credential_id, revision, enabled, reason, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, db.NewID(), s.ID, p.CredentialID, s.Revision, s.Enabled, p.Reason, now); err != nil {
		return nil, fmt.Errorf("subscriptions: audit configure: %w", err)
	}
	return s, nil
}

const deliveryColumns = `id, subscription_id, queue_id, event_id, sequence, revision, state, created_at, available_at,
	lease_epoch, lease_until, lease_secret_digest, lease_session_id, attempts, attempt_budget, acknowledged_at,
	expired_reason, last_error, nacks`

func scanDelivery(row scanner) (*Delivery, error) {
	var (
		d       Delivery
		until   sql.NullTime
		acked   sql.NullTime
		session sql.NullString
		reason  sql.NullString
		lastErr sql.NullString
	)
	err := row.Scan(&d.ID, &d.SubscriptionID, &d.QueueID, &d.EventID, &d.Sequence, &d.Revision, &d.State,
		&d.CreatedAt, &d.AvailableAt, &d.LeaseEpoch, &until, &d.LeaseDigest, &session, &d.Attempts,
		&d.AttemptBudget, &acked, &reason, &lastErr, &d.Nacks)
	if err != nil {
		return nil, err
	}
	if until.Valid {
		t := until.Time
		d.LeaseUntil = &t
	}
	if acked.Valid {
		t := acked.Time
		d.AcknowledgedAt = &t
	}
	d.LeaseSession = session.String
	d.ExpiredReason = reason.String
	d.LastError = lastErr.String
	return &d, nil
}

// deliveryGet returns a delivery of a subscription, or sql.ErrNoRows (also
// for a delivery of another subscription, S-19).
func deliveryGet(ctx context.Context, q Querier, subscriptionID, id string) (*Delivery, error) {
	d, err := scanDelivery(q.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM event_deliveries WHERE id = ? AND subscription_id = ?`, id, subscriptionID))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("subscriptions: get delivery: %w", err)
	}
	return d, err
}

// deliveryListParams page a subscription's deliveries, newest first.
// ExpiredReason, with State EXPIRED, keeps only the dead letters of that
// reason (K-6).
type deliveryListParams struct {
	SubscriptionID string
	State          string
	ExpiredReason  string
	httpx.ListPage
}

// deliveryList returns up to p.Limit+1 deliveries.
func deliveryList(ctx context.Context, q Querier, p *deliveryListParams) ([]*Delivery, error) {
	base := `SELECT ` + deliveryColumns + ` FROM event_deliveries WHERE subscription_id = ?`
	args := []any{p.SubscriptionID}
	if p.ExpiredReason != "" {
		base += ` AND expired_reason = ?`
		args = append(args, p.ExpiredReason)
	}
	rows, err := httpx.ListRows(ctx, q, scanDelivery, base, args, "", p.State, p.ListPage)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: list deliveries: %w", err)
	}
	return rows, nil
}

// queryDeliveries runs a query that selects deliveryColumns and returns
// the deliveries in order.
func queryDeliveries(ctx context.Context, q Querier, query string, args ...any) ([]*Delivery, error) {
	return db.QueryAll(ctx, q, scanDelivery, query, args...)
}

// deliveryRetryParams describe a manual retry of an EXPIRED delivery.
type deliveryRetryParams struct {
	SubscriptionID     string
	ID                 string
	CredentialID       string
	ExpectedRevision   uint64
	AdditionalAttempts int
	Reason             string
}

// deliveryRetry makes an EXPIRED delivery PENDING again with more attempts
// (S-21). Attempts, lease epoch, event identity and the backlog slot are
// kept; the cumulative budget may not pass 1,000,000. expired_reason is
// cleared (it describes EXPIRED deliveries only); last_error and nacks are
// kept, as history.
func deliveryRetry(ctx context.Context, tx *sql.Tx, p *deliveryRetryParams) (*Delivery, error) {
	d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM event_deliveries WHERE id = ? AND subscription_id = ? FOR UPDATE`, p.ID, p.SubscriptionID))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("subscriptions: lock delivery: %w", err)
	}
	if d.State != stateExpired {
		return nil, httpx.Errorf(httpx.CodeStateConflict, "delivery is %s; only EXPIRED deliveries can be retried", d.State)
	}
	if d.Revision != p.ExpectedRevision {
		return nil, httpx.Errorf(httpx.CodeStateConflict, "expected_revision %d does not match the delivery's revision %d", p.ExpectedRevision, d.Revision)
	}
	if d.AttemptBudget+p.AdditionalAttempts > maxAttemptBudget {
		return nil, httpx.Errorf(httpx.CodeStateConflict, "the attempt budget would exceed %d", maxAttemptBudget)
	}
	now := db.Now()
	d.State = statePending
	d.Revision++
	d.AttemptBudget += p.AdditionalAttempts
	d.AvailableAt = now
	d.LeaseUntil = nil
	d.ExpiredReason = ""
	if _, err := tx.ExecContext(ctx, `
		UPDATE event_deliveries SET state = 'PENDING', revision = ?, attempt_budget = ?, available_at = ?, lease_until = NULL,
			expired_reason = NULL
		WHERE id = ?`, d.Revision, d.AttemptBudget, now, d.ID); err != nil {
		return nil, fmt.Errorf("subscriptions: retry: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO delivery_retries (id, delivery_id, credential_id, revision, additional_attempts, reason, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, db.NewID(), d.ID, p.CredentialID, d.Revision, p.AdditionalAttempts, p.Reason, now); err != nil {
		return nil, fmt.Errorf("subscriptions: audit retry: %w", err)
	}
	return d, nil
}
