package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// AckIntent is the ACK proof of one delivery, kept in receiver_ack_intents
// from the commit of its event's transaction until the platform has
// answered the ACK (K-13). LeaseSecret is a secret: it lives only in the
// receiver's own database and never in a log line; String and GoString
// leave it out.
type AckIntent struct {
	SubscriptionID string
	DeliveryID     string
	Epoch          uint64
	LeaseSecret    string
	// EventID is the event the delivery carries; AckIntents fills it in,
	// ApplyWithIntent takes it from the event.
	EventID string
}

// String names the delivery and epoch, never the secret.
func (a AckIntent) String() string {
	return fmt.Sprintf("delivery %s epoch %d", a.DeliveryID, a.Epoch)
}

// GoString is String, so %#v does not reveal the secret either.
func (a AckIntent) GoString() string { return a.String() }

// maxLeaseSecret is the width of receiver_ack_intents.lease_secret.
const maxLeaseSecret = 128

func (a AckIntent) check() error {
	switch {
	case !validID(a.SubscriptionID) || !validID(a.DeliveryID):
		return fmt.Errorf("inbox: ACK intent: subscription and delivery ids must be 32 lowercase hex characters")
	case a.Epoch == 0:
		return fmt.Errorf("inbox: ACK intent: epoch must be positive")
	case a.LeaseSecret == "" || len(a.LeaseSecret) > maxLeaseSecret:
		return fmt.Errorf("inbox: ACK intent: lease secret must be 1 to %d bytes", maxLeaseSecret)
	}
	for i := 0; i < len(a.LeaseSecret); i++ {
		if c := a.LeaseSecret[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("inbox: ACK intent: lease secret must be printable ASCII")
		}
	}
	return nil
}

// ackIntentRecord writes the intent inside the event's transaction. An
// intent already kept for the delivery is replaced only by a newer epoch.
func (s *Store) ackIntentRecord(ctx context.Context, tx *sql.Tx, eventID string, a *AckIntent) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	// lease_secret is assigned before epoch: MySQL evaluates the
	// assignments left to right, with the values already changed.
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO receiver_ack_intents (consumer_name, subscription_id, delivery_id, epoch, lease_secret, event_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE
			lease_secret = IF(VALUES(epoch) > epoch, VALUES(lease_secret), lease_secret),
			event_id = IF(VALUES(epoch) > epoch, VALUES(event_id), event_id),
			created_at = IF(VALUES(epoch) > epoch, VALUES(created_at), created_at),
			epoch = GREATEST(epoch, VALUES(epoch))`,
		s.consumer, a.SubscriptionID, a.DeliveryID, a.Epoch, a.LeaseSecret, eventID, now); err != nil {
		return fmt.Errorf("inbox: record ACK intent: %w", err)
	}
	return nil
}

// AckIntents returns the ACK intents of this receiving purpose on a
// subscription that are not cleared yet, oldest first: proofs of committed
// events whose ACK the platform has not confirmed. `receiver consume` sends
// them before anything else on every connection. It costs one indexed
// read.
func (s *Store) AckIntents(ctx context.Context, subscriptionID string) ([]AckIntent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT delivery_id, epoch, lease_secret, event_id FROM receiver_ack_intents
		WHERE consumer_name = ? AND subscription_id = ? ORDER BY created_at, delivery_id`, s.consumer, subscriptionID)
	if err != nil {
		return nil, fmt.Errorf("inbox: read ACK intents: %w", err)
	}
	defer rows.Close()
	var out []AckIntent
	for rows.Next() {
		a := AckIntent{SubscriptionID: subscriptionID}
		if err := rows.Scan(&a.DeliveryID, &a.Epoch, &a.LeaseSecret, &a.EventID); err != nil {
			return nil, fmt.Errorf("inbox: read ACK intents: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read ACK intents: %w", err)
	}
	return out, nil
}

// AckIntentClear deletes the intent of a delivery once the platform has
// answered its ACK for good: confirmed (also as deduplicated), or refused
// because a newer lease replaced the proof. An intent of a newer epoch
// than epoch is kept. Clearing what is not there is not an error, so the
// call is idempotent.
func (s *Store) AckIntentClear(ctx context.Context, subscriptionID, deliveryID string, epoch uint64) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM receiver_ack_intents
		WHERE consumer_name = ? AND subscription_id = ? AND delivery_id = ? AND epoch <= ?`,
		s.consumer, subscriptionID, deliveryID, epoch); err != nil {
		return fmt.Errorf("inbox: clear ACK intent: %w", err)
	}
	return nil
}
