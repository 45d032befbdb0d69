package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// ErrHistoryExpired is returned when a subscription's cursor has fallen
// below its queue's retention mark: the events it has not scanned were
// purged. The subscription never skips silently (T-11, S-11).
var ErrHistoryExpired = httpx.Errorf(httpx.CodeEventHistoryExpired, "events this subscription has not received were purged by retention")

// DefaultMaterializeBatch bounds the events one materialisation transaction
// scans.
const DefaultMaterializeBatch = 500

// Materialize turns events of the subscription's queue after its cursor
// into PENDING deliveries (S-23, S-24), in one transaction under the
// subscription's row lock: events are scanned in sequence order, each of a
// subscribed type becomes a delivery while the backlog is below max_pending,
// and the cursor advances over every scanned event, matching or not. A full
// backlog stops the scan before the event that did not fit; nothing is ever
// skipped. A paused subscription is left as it is. It returns the number of
// deliveries created and whether the log may hold more to scan.
func Materialize(ctx context.Context, pool *sql.DB, subscriptionID string, batch int) (created int, more bool, err error) {
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		created, more = 0, false
		s, err := subscriptionLock(ctx, tx, subscriptionID)
		if err != nil {
			return err
		}
		if !s.Enabled {
			return nil
		}
		stream, err := tasks.StreamGet(ctx, tx, s.QueueID)
		if err != nil {
			return err
		}
		if s.CursorSequence >= stream.Head {
			return nil
		}
		if s.CursorSequence+1 < stream.RetentionMark {
			return ErrHistoryExpired
		}
		room := s.MaxPending - s.PendingCount
		if room <= 0 {
			return nil
		}
		rows, err := tx.QueryContext(ctx, `SELECT sequence, id, type FROM result_events
			WHERE queue_id = ? AND sequence > ? ORDER BY sequence LIMIT ?`, s.QueueID, s.CursorSequence, batch)
		if err != nil {
			return err
		}
		type scanned struct {
			seq     uint64
			id, typ string
		}
		var events []scanned
		for rows.Next() {
			var e scanned
			if err := rows.Scan(&e.seq, &e.id, &e.typ); err != nil {
				rows.Close()
				return err
			}
			events = append(events, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		cursor := s.CursorSequence
		now := db.Now()
		var (
			values []string
			args   []any
		)
		for _, e := range events {
			if e.seq != cursor+1 {
				// Retention purged what the cursor had not reached.
				return ErrHistoryExpired
			}
			if s.wants(e.typ) {
				if room == 0 {
					break
				}
				room--
				values = append(values, "(?, ?, ?, ?, ?, 1, 'PENDING', ?, ?, 0, 0, ?)")
				args = append(args, db.NewID(), s.ID, s.QueueID, e.id, e.seq, now, now, s.MaxAttempts)
			}
			cursor = e.seq
		}
		if len(values) > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO event_deliveries
				(id, subscription_id, queue_id, event_id, sequence, revision, state, created_at, available_at,
				 lease_epoch, attempts, attempt_budget) VALUES `+strings.Join(values, ", "), args...); err != nil {
				return err
			}
		}
		if cursor != s.CursorSequence {
			if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET cursor_sequence = ? WHERE id = ?`, cursor, s.ID); err != nil {
				return err
			}
		}
		created = len(values)
		more = cursor < stream.Head && room > 0
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrHistoryExpired) {
			return 0, false, ErrHistoryExpired
		}
		return 0, false, fmt.Errorf("subscriptions: materialize: %w", err)
	}
	return created, more, nil
}

// MaterializeAll materialises every enabled subscription that is behind its
// queue's head, each until it is caught up or its backlog is full. It is
// what the background materialiser runs; errors of single subscriptions are
// passed to onError and do not stop the others.
func MaterializeAll(ctx context.Context, pool *sql.DB, batch int, onError func(subscriptionID string, err error)) (int, error) {
	ids, err := db.QueryStrings(ctx, pool, `SELECT s.id FROM subscriptions s JOIN queue_streams q ON q.queue_id = s.queue_id
		WHERE s.enabled = 1 AND s.cursor_sequence < q.head_sequence`)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: find behind: %w", err)
	}
	total := 0
	for _, id := range ids {
		for ctx.Err() == nil {
			n, more, err := Materialize(ctx, pool, id, batch)
			total += n
			if err != nil {
				onError(id, err)
				break
			}
			if !more {
				break
			}
		}
	}
	return total, ctx.Err()
}

// RetentionGuard keeps events with a live delivery (PENDING, LEASED or
// EXPIRED) from being purged (T-11).
const RetentionGuard tasks.LiveDeliveryGuard = `EXISTS (SELECT 1 FROM event_deliveries d
	WHERE d.queue_id = e.queue_id AND d.sequence = e.sequence AND d.state IN ('PENDING', 'LEASED', 'EXPIRED'))`
