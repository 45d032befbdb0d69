package tasks

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
)

// The result log (T-8 … T-11).
//
// An append stages its event in result_intake inside the task change's
// transaction; the post-commit sequencer (sequencer.go) gives it its
// sequence after the COMMIT, before the write returns. See sequencer.go for
// why sequences still become visible in commit order and without gaps.

// newEvent makes the event of t's change (t already updated to its new
// state) at now; changes.write appends it.
func newEvent(t *Task, eventType string, details eventDetails, now time.Time) (*Event, error) {
	snapshot, err := json.Marshal(taskSnapshot{
		SchemaVersion: 1, TaskID: t.ID, QueueID: t.QueueID, State: t.State,
		Revision: httpx.Uint64(t.Revision), EffectUncertain: t.EffectUncertain,
		Result: t.Result, CurrentAttemptID: t.CurrentAttemptID,
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: encode snapshot: %w", err)
	}
	detailsJSON, err := json.Marshal(details)
	if err != nil {
		return nil, fmt.Errorf("tasks: encode details: %w", err)
	}
	return &Event{
		ID: db.NewID(), Type: eventType, AggregateKind: "task",
		AggregateID: t.ID, AggregateRevision: httpx.Uint64(t.Revision), OccurredAt: httpx.FormatTime(now),
		Details: detailsJSON, Snapshot: snapshot, queueID: t.QueueID, namespaceID: t.NamespaceID, occurredAt: now,
	}, nil
}

// Stream is the state of one queue's log.
type Stream struct {
	// Head is the highest committed sequence, 0 for an empty log.
	Head uint64
	// RetentionMark is the lowest sequence still retained.
	RetentionMark uint64
}

// StreamGet returns the committed head and retention mark of a queue's log.
// A queue that never logged anything has head 0 and mark 1.
func StreamGet(ctx context.Context, q Querier, queueID string) (Stream, error) {
	var s Stream
	err := q.QueryRowContext(ctx, `SELECT head_sequence, retention_mark FROM queue_streams WHERE queue_id = ?`, queueID).Scan(&s.Head, &s.RetentionMark)
	if errors.Is(err, sql.ErrNoRows) {
		return Stream{Head: 0, RetentionMark: 1}, nil
	}
	if err != nil {
		return Stream{}, fmt.Errorf("tasks: read stream: %w", err)
	}
	return s, nil
}

// streamHeads returns the committed heads of the given queues' logs, keyed
// by queue; a queue that never logged anything is absent.
func streamHeads(ctx context.Context, q Querier, queueIDs []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(queueIDs))
	if len(queueIDs) == 0 {
		return out, nil
	}
	args := db.Args(queueIDs)
	rows, err := q.QueryContext(ctx, `SELECT queue_id, head_sequence FROM queue_streams
		WHERE queue_id IN (`+db.Placeholders(len(queueIDs))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks: read heads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var head uint64
		if err := rows.Scan(&id, &head); err != nil {
			return nil, fmt.Errorf("tasks: read heads: %w", err)
		}
		out[id] = head
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks: read heads: %w", err)
	}
	return out, nil
}

// Querier is a pool or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// EventListAfter returns up to limit events of a queue with sequence > after,
// in sequence order. Only committed events are returned, and by T-9 a later
// call never returns a sequence <= the last one seen.
func EventListAfter(ctx context.Context, q Querier, queueID string, after uint64, limit int) ([]Event, error) {
	rows, err := q.QueryContext(ctx, `
		SELECT id, sequence, type, task_id, task_revision, occurred_at, details, snapshot
		FROM result_events WHERE queue_id = ? AND sequence > ? ORDER BY sequence LIMIT ?`, queueID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("tasks: list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks: list events: %w", err)
	}
	return out, nil
}

// EventRef is what a scan of the log returns of an event: enough to decide
// whether it matters, without its details and snapshot.
type EventRef struct {
	Sequence uint64
	ID       string
	Type     string
}

// eventScan returns up to limit events of a queue with sequence > after, in
// sequence order, without their bodies; like EventListAfter, it returns
// only committed events.
func eventScan(ctx context.Context, q Querier, queueID string, after uint64, limit int) ([]EventRef, error) {
	rows, err := q.QueryContext(ctx, `SELECT sequence, id, type FROM result_events
		WHERE queue_id = ? AND sequence > ? ORDER BY sequence LIMIT ?`, queueID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("tasks: scan events: %w", err)
	}
	defer rows.Close()
	var out []EventRef
	for rows.Next() {
		var e EventRef
		if err := rows.Scan(&e.Sequence, &e.ID, &e.Type); err != nil {
			return nil, fmt.Errorf("tasks: scan events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks: scan events: %w", err)
	}
	return out, nil
}

// eventsBySequence returns the events of a queue at the given sequences,
// keyed by sequence, in one statement; purged sequences are absent.
func eventsBySequence(ctx context.Context, q Querier, queueID string, sequences []uint64) (map[uint64]Event, error) {
	out := make(map[uint64]Event, len(sequences))
	if len(sequences) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(sequences)+1)
	args = append(args, queueID)
	for _, seq := range sequences {
		args = append(args, seq)
	}
	// The event's trace context is its task's: the join reads it in the
	// same statement, one primary-key lookup per event, so that a
	// delivery costs no query of its own.
	rows, err := q.QueryContext(ctx, `
		SELECT e.id, e.sequence, e.type, e.task_id, e.task_revision, e.occurred_at, e.details, e.snapshot,
			t.trace_parent, t.trace_state
		FROM result_events e LEFT JOIN tasks t ON t.id = e.task_id
		WHERE e.queue_id = ? AND e.sequence IN (`+db.Placeholders(len(sequences))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks: get events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var parent, state sql.NullString
		ev, err := scanEvent(rows, &parent, &state)
		if err != nil {
			return nil, err
		}
		ev.Trace = tracing.Context{Parent: parent.String, State: state.String}
		out[uint64(ev.Sequence)] = ev
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks: get events: %w", err)
	}
	return out, nil
}

// EventGet returns one event by id within a queue.
func EventGet(ctx context.Context, q Querier, queueID, eventID string) (Event, error) {
	rows, err := q.QueryContext(ctx, `
		SELECT id, sequence, type, task_id, task_revision, occurred_at, details, snapshot
		FROM result_events WHERE id = ? AND queue_id = ?`, eventID, queueID)
	if err != nil {
		return Event{}, fmt.Errorf("tasks: get event: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Event{}, fmt.Errorf("tasks: get event: %w", err)
		}
		return Event{}, sql.ErrNoRows
	}
	return scanEvent(rows)
}

// scanEvent reads an event's columns and then into extra, for the
// columns a query adds after them.
func scanEvent(rows *sql.Rows, extra ...any) (Event, error) {
	var (
		ev       Event
		seq, rev uint64
		at       time.Time
		details  []byte
		snapshot []byte
	)
	dest := append([]any{&ev.ID, &seq, &ev.Type, &ev.AggregateID, &rev, &at, &details, &snapshot}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return Event{}, fmt.Errorf("tasks: scan event: %w", err)
	}
	ev.Sequence, ev.AggregateRevision = httpx.Uint64(seq), httpx.Uint64(rev)
	ev.AggregateKind = "task"
	ev.OccurredAt = httpx.FormatTime(at)
	ev.Details, ev.Snapshot = details, snapshot
	return ev, nil
}

// RetentionHold is offered by modules that need result-log events kept
// past retention, such as the subscriptions module for events with live
// deliveries (T-11). The tasks module finds every module of the run that
// offers it (modules.Offered) and asks each before it purges.
type RetentionHold interface {
	// RetentionHeld returns the lowest sequence in [from, to) of queue
	// queueID's log that must be kept, or to when none must. It runs
	// inside the purge's transaction q, which holds the queue's log head
	// locked, once per purge batch: it should be one indexed read.
	RetentionHeld(ctx context.Context, q Querier, queueID string, from, to uint64) (uint64, error)
}

// EventPurgeParams describe one retention purge of a queue's log.
type EventPurgeParams struct {
	QueueID string
	// Cutoff is the age limit: only events that occurred before it go.
	Cutoff time.Time
	// Batch is the most events one purge deletes.
	Batch int
	// Holds are asked, in order, which events must be kept.
	Holds []RetentionHold
}

// EventPurge deletes, from the bottom of a queue's log, up to p.Batch
// events older than p.Cutoff, stopping at the first event that is younger
// or that one of p.Holds keeps, and records the new retention mark. It
// returns how many events it deleted.
func EventPurge(ctx context.Context, pool *sql.DB, p *EventPurgeParams) (int, error) {
	queueID, cutoff, batch, holds := p.QueueID, p.Cutoff, p.Batch, p.Holds
	deleted := 0
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		deleted = 0
		var mark, head uint64
		err := tx.QueryRowContext(ctx, `SELECT retention_mark, head_sequence FROM queue_streams WHERE queue_id = ? FOR UPDATE`, queueID).Scan(&mark, &head)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT sequence, occurred_at < ? FROM result_events
			WHERE queue_id = ? AND sequence >= ? ORDER BY sequence LIMIT ?`, cutoff, queueID, mark, batch)
		if err != nil {
			return err
		}
		next := mark
		for rows.Next() {
			var seq uint64
			var old bool
			if err := rows.Scan(&seq, &old); err != nil {
				rows.Close()
				return err
			}
			if !old || seq != next {
				break
			}
			next = seq + 1
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, h := range holds {
			if next == mark {
				break
			}
			held, err := h.RetentionHeld(ctx, tx, queueID, mark, next)
			if err != nil {
				return err
			}
			next = min(next, max(held, mark))
		}
		if next == mark {
			return nil
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM result_events WHERE queue_id = ? AND sequence >= ? AND sequence < ?`, queueID, mark, next)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		deleted = int(n)
		_, err = tx.ExecContext(ctx, `UPDATE queue_streams SET retention_mark = ?, updated_at = ? WHERE queue_id = ?`, next, db.Now(), queueID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("tasks: retention purge: %w", err)
	}
	return deleted, nil
}

// streamQueues returns the ids of every queue that has a log.
func streamQueues(ctx context.Context, pool *sql.DB) ([]string, error) {
	ids, err := db.QueryStrings(ctx, pool, `SELECT queue_id FROM queue_streams ORDER BY queue_id`)
	if err != nil {
		return nil, fmt.Errorf("tasks: list streams: %w", err)
	}
	return ids, nil
}
