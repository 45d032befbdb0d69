package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Deletion of a subscription (K-11). The subscription's row goes at once,
// so it stops (no materialisation, no claim), its slot of the namespace's
// limit and its name are free, and every call that names it answers 404;
// a deletion record keeps what was deleted, by whom and why. Its
// deliveries are removed afterwards, in bounded batches, by the module's
// purger (deliveryPurge); the audit records of its changes, ACKs, retries
// and operations stay.

// ErrSubscriptionDeleted answers an event connection whose subscription
// was deleted while it was connected.
var ErrSubscriptionDeleted = httpx.Errorf(httpx.CodeSubscriptionDeleted, "the subscription was deleted")

// DefaultPurgeBatch bounds the deliveries one purge transaction removes.
const DefaultPurgeBatch = 1000

// Deletion is the receipt of a deletion.
type Deletion struct {
	SubscriptionID string       `json:"subscription_id"`
	Name           string       `json:"name"`
	Revision       httpx.Uint64 `json:"revision"`
	DeletedAt      string       `json:"deleted_at"`
}

// subscriptionDeleteParams describe a deletion.
type subscriptionDeleteParams struct {
	ID               string
	CredentialID     string
	ExpectedRevision uint64
	Reason           string
}

// subscriptionDelete deletes a subscription in tx and records the deletion
// (K-11). A stale expected_revision is a STATE_CONFLICT.
func subscriptionDelete(ctx context.Context, tx *sql.Tx, p *subscriptionDeleteParams) (Deletion, error) {
	s, err := subscriptionLock(ctx, tx, p.ID)
	if err != nil {
		return Deletion{}, err
	}
	if s.Revision != p.ExpectedRevision {
		return Deletion{}, httpx.Errorf(httpx.CodeStateConflict, "expected_revision %d does not match the subscription's revision %d", p.ExpectedRevision, s.Revision)
	}
	now := db.Now()
	if _, err := tx.ExecContext(ctx, `DELETE FROM subscriptions WHERE id = ?`, s.ID); err != nil {
		return Deletion{}, fmt.Errorf("subscriptions: delete: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO subscription_deletions
		(subscription_id, namespace_id, queue_id, credential_id, name, revision, reason, deleted_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, s.ID, s.NamespaceID, s.QueueID, p.CredentialID, s.Name, s.Revision, p.Reason, now); err != nil {
		return Deletion{}, fmt.Errorf("subscriptions: audit delete: %w", err)
	}
	return Deletion{SubscriptionID: s.ID, Name: s.Name, Revision: httpx.Uint64(s.Revision), DeletedAt: httpx.FormatTime(now)}, nil
}

// subscriptionDeletedBy reports whether credentialID deleted the
// subscription id of namespaceID.
func subscriptionDeletedBy(ctx context.Context, q Querier, id, namespaceID, credentialID string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM subscription_deletions WHERE subscription_id = ? AND namespace_id = ? AND credential_id = ?`,
		id, namespaceID, credentialID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("subscriptions: read deletion: %w", err)
	}
	return true, nil
}

// deliveryPurge removes deliveries of deleted subscriptions, up to batch
// per transaction, oldest deletion first, and marks a deletion purged once
// none of its deliveries remain. Each transaction deletes through the
// delivery list index (subscription_id, …) and holds its locks briefly. It
// returns how many deliveries it removed, and stops early when ctx ends;
// it is idempotent and safe on several nodes at once.
func deliveryPurge(ctx context.Context, pool *sql.DB, batch int) (int, error) {
	ids, err := db.QueryStrings(ctx, pool, `SELECT subscription_id FROM subscription_deletions WHERE purged_at IS NULL ORDER BY deleted_at LIMIT 100`)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: purge: %w", err)
	}
	total := 0
	for _, id := range ids {
		for ctx.Err() == nil {
			res, err := pool.ExecContext(ctx, `DELETE FROM event_deliveries WHERE subscription_id = ? LIMIT ?`, id, batch)
			if err != nil {
				return total, fmt.Errorf("subscriptions: purge: %w", err)
			}
			n, _ := res.RowsAffected()
			total += int(n)
			if int(n) < batch {
				if _, err := pool.ExecContext(ctx, `UPDATE subscription_deletions SET purged_at = ? WHERE subscription_id = ? AND purged_at IS NULL`,
					db.Now(), id); err != nil {
					return total, fmt.Errorf("subscriptions: purge: %w", err)
				}
				break
			}
		}
	}
	return total, ctx.Err()
}
