package inbox

import (
	"context"
	"fmt"
)

// PruneBatch is how many Inbox records one statement of InboxPrune deletes
// at most, so no statement holds many locks for long.
const PruneBatch = 1000

// InboxPrune deletes the Inbox records of this receiving purpose and queue
// whose events have a sequence below horizon, the subscription's
// redelivery_horizon (K-12): the platform can never deliver those events
// again, so their records can no longer prevent a double apply. Records of
// events at or above the horizon, the task views and the ACK intents are
// never touched. It deletes in batches of PruneBatch, each its own
// statement, and returns how many records it deleted; it is idempotent and
// safe while consumers run. Its account needs DELETE on receiver_inbox.
//
// The sequence is read from the frozen event JSON; each batch scans this
// purpose's records of the queue, so run it now and then, not per event.
func (s *Store) InboxPrune(ctx context.Context, horizon uint64) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, `DELETE FROM receiver_inbox
			WHERE consumer_name = ? AND queue_id = ?
			AND CAST(JSON_UNQUOTE(JSON_EXTRACT(event_json, '$.sequence')) AS UNSIGNED) < ?
			LIMIT ?`, s.consumer, s.queueID, horizon, PruneBatch)
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		total += n
		if n < PruneBatch {
			return total, nil
		}
	}
}
