package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

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

// deliveryMaterialize turns events of the subscription's queue after its cursor
// into PENDING deliveries (S-23, S-24), in one transaction under the
// subscription's row lock: events are scanned in sequence order, each of a
// subscribed type becomes a delivery while the backlog is below max_pending,
// and the cursor advances over every scanned event, matching or not. A full
// backlog stops the scan before the event that did not fit; nothing is ever
// skipped. A paused subscription is left as it is; a deleted one is
// ErrSubscriptionDeleted. It returns the number of
// deliveries created and whether the log may hold more to scan.
func deliveryMaterialize(ctx context.Context, pool *sql.DB, log Log, subscriptionID string, batch int) (created int, more bool, err error) {
	return materializeLearning(ctx, pool, log, subscriptionID, batch, nil)
}

// materializeLearning is deliveryMaterialize, telling room (when not nil)
// the subscription's max_pending.
func materializeLearning(ctx context.Context, pool *sql.DB, log Log, subscriptionID string, batch int, room *freedRoom) (created int, more bool, err error) {
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		created, more = 0, false
		s, err := subscriptionLock(ctx, tx, subscriptionID)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrSubscriptionDeleted
		}
		if err != nil {
			return err
		}
		if room != nil {
			room.learn(s.ID, s.MaxPending)
		}
		if !s.Enabled {
			return nil
		}
		stream, err := log.StreamGet(ctx, tx, s.QueueID)
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
		// A subscription to every result type fills a slot with each
		// result it scans, so it reads no more than the room: the rest
		// would only be read again by the next materialisation. Others
		// read a whole batch, since most of it may not match.
		scan := batch
		if s.wantsEveryResult() {
			scan = min(batch, room)
		}
		events, err := log.EventScan(ctx, tx, s.QueueID, s.CursorSequence, scan)
		if err != nil {
			return err
		}
		var ins deliveryInserts
		cursor, left, err := ins.scan(s, events, room, db.Now())
		if err != nil {
			return err
		}
		if err := ins.exec(ctx, tx); err != nil {
			return err
		}
		if cursor != s.CursorSequence {
			if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET cursor_sequence = ? WHERE id = ?`, cursor, s.ID); err != nil {
				return err
			}
		}
		room = left
		created = ins.rows
		more = cursor < stream.Head && room > 0
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSubscriptionDeleted) && room != nil {
			room.forget(subscriptionID)
		}
		if errors.Is(err, ErrHistoryExpired) || errors.Is(err, ErrSubscriptionDeleted) {
			return 0, false, err
		}
		return 0, false, fmt.Errorf("subscriptions: materialize: %w", err)
	}
	return created, more, nil
}

// deliveryInserts collects the rows of new deliveries for one INSERT.
type deliveryInserts struct {
	values []string
	args   []any
	rows   int
}

// scan walks events for s, in sequence order, the first right after s's
// cursor, with room slots free in its backlog (S-23, S-24): each event of a
// subscribed type becomes a delivery while there is room, and the cursor
// advances over every scanned event, matching or not, stopping before the
// first that did not fit; nothing is ever skipped. It returns the new cursor
// and the room left, or ErrHistoryExpired when the events do not follow the
// cursor (retention purged what it had not reached).
func (ins *deliveryInserts) scan(s *Subscription, events []tasks.EventRef, room int, now time.Time) (cursor uint64, left int, err error) {
	cursor = s.CursorSequence
	for _, e := range events {
		if e.Sequence != cursor+1 {
			return 0, 0, ErrHistoryExpired
		}
		if s.wants(e.Type) {
			if room == 0 {
				break
			}
			room--
			ins.values = append(ins.values, "(?, ?, ?, ?, ?, 1, 'PENDING', ?, ?, 0, 0, ?)")
			ins.args = append(ins.args, db.NewID(), s.ID, s.QueueID, e.ID, e.Sequence, now, now, s.MaxAttempts)
			ins.rows++
		}
		cursor = e.Sequence
	}
	return cursor, room, nil
}

// deliveryInsertArgs is the number of arguments of one row of
// deliveryInserts; insertRowsPerStatement bounds the rows of one INSERT.
const (
	deliveryInsertArgs     = 8
	insertRowsPerStatement = DefaultMaterializeBatch
)

// exec inserts the collected deliveries, if any.
func (ins *deliveryInserts) exec(ctx context.Context, tx *sql.Tx) error {
	for from := 0; from < ins.rows; from += insertRowsPerStatement {
		to := min(from+insertRowsPerStatement, ins.rows)
		if _, err := tx.ExecContext(ctx, `INSERT INTO event_deliveries
			(id, subscription_id, queue_id, event_id, sequence, revision, state, created_at, available_at,
			 lease_epoch, attempts, attempt_budget) VALUES `+strings.Join(ins.values[from:to], ", "),
			ins.args[from*deliveryInsertArgs:to*deliveryInsertArgs]...); err != nil {
			return err
		}
	}
	return nil
}

// materializeAppended runs in a sequencing pass of the result log (a
// tasks.SequencedHook): it materialises the events the pass appended for
// every enabled subscription of their queues whose cursor stood right
// before them, so that their deliveries commit with the events and no
// transaction of its own comes between an append and a claim. It follows
// deliveryMaterialize's rules (scan). Subscriptions another transaction
// holds (the materialiser, a configuration change: SKIP LOCKED), and those
// behind, are left to the background materialiser: leftBehind reports
// whether a queue has such a subscription, or may have (a queue none of
// whose subscriptions was locked here). Paused subscriptions wait for their
// resume, full backlogs for the ACKs that make room (RoomFreed). It
// returns the subscriptions it created deliveries for.
func materializeAppended(ctx context.Context, tx *sql.Tx, appended []tasks.Appended) (filled []string, leftBehind bool, err error) {
	byQueue := make(map[string]tasks.Appended, len(appended))
	queues := make([]any, 0, len(appended))
	positions := make([]any, 0, 2*len(appended))
	for _, a := range appended {
		byQueue[a.QueueID] = a
		queues = append(queues, a.QueueID)
		positions = append(positions, a.QueueID, a.From)
	}
	// Each row also counts the enabled subscriptions of its queue, without
	// locking them: more than were locked here means some were left.
	type lockedSubscription struct {
		*Subscription
		enabledInQueue int
	}
	subs, err := db.QueryAll(ctx, tx, func(row db.Scanner) (lockedSubscription, error) {
		var l lockedSubscription
		var err error
		l.Subscription, err = scanSubscription(scanMore{row, []any{&l.enabledInQueue}})
		return l, err
	}, `SELECT `+subscriptionColumns+`,
		(SELECT COUNT(*) FROM subscriptions x FORCE INDEX (ix_subscriptions_list) WHERE x.queue_id = s.queue_id AND x.enabled = 1)
		FROM subscriptions s
		WHERE s.queue_id IN (`+db.Placeholders(len(queues))+`) AND s.enabled = 1
		AND (s.queue_id, s.cursor_sequence) IN (`+strings.TrimSuffix(strings.Repeat("(?, ?), ", len(appended)), ", ")+`)
		FOR UPDATE SKIP LOCKED`, append(queues, positions...)...)
	if err != nil {
		return nil, false, err
	}
	var ins deliveryInserts
	var cursors, moved []any
	locked := make(map[string]int, len(appended))
	enabled := make(map[string]int, len(appended))
	now := db.Now()
	for _, s := range subs {
		locked[s.QueueID]++
		enabled[s.QueueID] = s.enabledInQueue
		room := s.MaxPending - s.PendingCount
		if room <= 0 {
			continue
		}
		before := ins.rows
		cursor, _, err := ins.scan(s.Subscription, byQueue[s.QueueID].Events, room, now)
		if err != nil {
			return nil, false, err
		}
		if ins.rows > before {
			filled = append(filled, s.ID)
		}
		if cursor != s.CursorSequence {
			cursors = append(cursors, s.ID, cursor)
			moved = append(moved, s.ID)
		}
	}
	if err := ins.exec(ctx, tx); err != nil {
		return nil, false, err
	}
	if len(moved) > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET cursor_sequence = `+db.CaseByID(len(moved))+
			` WHERE id IN (`+db.Placeholders(len(moved))+`)`, append(cursors, moved...)...); err != nil {
			return nil, false, err
		}
	}
	for _, a := range appended {
		if locked[a.QueueID] == 0 || locked[a.QueueID] < enabled[a.QueueID] {
			leftBehind = true
		}
	}
	return filled, leftBehind, nil
}

// scanMore scans a row's leading columns into what its caller asks for
// and the rest into more.
type scanMore struct {
	row  db.Scanner
	more []any
}

func (s scanMore) Scan(dest ...any) error { return s.row.Scan(append(dest, s.more...)...) }

// deliveryMaterializeAll materialises every enabled subscription that is
// behind its queue's head and has room in its backlog, each until it is
// caught up or its backlog is full. It is what the background materialiser
// runs when it looks at every subscription; errors of single subscriptions
// are passed to onError and do not stop the others. room, when not nil,
// learns the max_pending of each subscription materialised.
func deliveryMaterializeAll(ctx context.Context, pool *sql.DB, log Log, batch int, room *freedRoom, onError func(subscriptionID string, err error)) (int, error) {
	ids, err := behindWithRoom(ctx, pool, log)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: find behind: %w", err)
	}
	return materializeEach(ctx, pool, log, ids, batch, room, onError), ctx.Err()
}

// behindWithRoom returns the enabled subscriptions that are behind their
// queue's head and have room in their backlog.
func behindWithRoom(ctx context.Context, pool *sql.DB, log Log) ([]string, error) {
	ids, err := behind(ctx, pool, log, nil)
	if err != nil {
		return nil, err
	}
	return withRoom(ctx, pool, ids)
}

// deliveryMaterializeFreed materialises those of the given subscriptions,
// whose backlogs ACKs made room in, that are enabled and behind their
// queue's head, as deliveryMaterializeAll does. It does not count their
// backlogs first: each materialisation counts its own, under its lock.
func deliveryMaterializeFreed(ctx context.Context, pool *sql.DB, log Log, ids []string, batch int, room *freedRoom, onError func(subscriptionID string, err error)) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ids, err := behind(ctx, pool, log, ids)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: find behind: %w", err)
	}
	return materializeEach(ctx, pool, log, ids, batch, room, onError), ctx.Err()
}

// materializeEach materialises each subscription until it is caught up or
// its backlog is full, and returns the deliveries it created.
func materializeEach(ctx context.Context, pool *sql.DB, log Log, ids []string, batch int, room *freedRoom, onError func(subscriptionID string, err error)) int {
	total := 0
	for _, id := range ids {
		for ctx.Err() == nil {
			n, more, err := materializeLearning(ctx, pool, log, id, batch, room)
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
	return total
}

// behind returns the enabled subscriptions whose cursor is below their
// queue's committed head: of ids, or of all when ids is nil.
func behind(ctx context.Context, pool *sql.DB, log Log, ids []string) ([]string, error) {
	query, args := `SELECT id, queue_id, cursor_sequence FROM subscriptions WHERE enabled = 1`, []any(nil)
	if ids != nil {
		query += ` AND id IN (` + db.Placeholders(len(ids)) + `)`
		args = db.Args(ids)
	}
	rows, err := pool.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type cursor struct {
		id, queueID string
		seq         uint64
	}
	var (
		cursors []cursor
		queues  []string
		seen    = map[string]bool{}
	)
	for rows.Next() {
		var c cursor
		if err := rows.Scan(&c.id, &c.queueID, &c.seq); err != nil {
			return nil, err
		}
		cursors = append(cursors, c)
		if !seen[c.queueID] {
			seen[c.queueID] = true
			queues = append(queues, c.queueID)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cursors) == 0 {
		return nil, nil
	}
	heads, err := log.StreamHeads(ctx, pool, queues)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cursors {
		if c.seq < heads[c.queueID] {
			out = append(out, c.id)
		}
	}
	return out, nil
}

// withRoom returns those of ids whose backlog has room. Materialising a
// full one is a transaction that locks it, finds no room and commits
// nothing, and a node with many full backlogs would run one per full
// subscription on every look; an ACK that frees room in one names it to
// the materialiser (RoomFreed) instead.
func withRoom(ctx context.Context, pool *sql.DB, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return db.QueryStrings(ctx, pool, `SELECT s.id FROM subscriptions s WHERE s.id IN (`+db.Placeholders(len(ids))+`)
		AND s.max_pending > `+backlogOfS, db.Args(ids)...)
}

// retentionHeld returns the lowest sequence in [from, to) of a queue's log
// whose event has a live delivery (PENDING, LEASED or EXPIRED), or to when
// none has: those events survive retention (T-11). It runs in the purge's
// transaction q and reads the retention index only.
func retentionHeld(ctx context.Context, q Querier, queueID string, from, to uint64) (uint64, error) {
	var held sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT MIN(sequence) FROM event_deliveries
		WHERE queue_id = ? AND sequence >= ? AND sequence < ? AND state IN ('PENDING', 'LEASED', 'EXPIRED')`,
		queueID, from, to).Scan(&held)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: retention hold: %w", err)
	}
	if !held.Valid {
		return to, nil
	}
	return uint64(held.Int64), nil
}
