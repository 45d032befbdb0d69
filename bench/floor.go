package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
)

// The schema floor runs the drain's own SQL with nothing around it: the
// statements that create, lease and acknowledge deliveries and read their
// events, batched as the Orbit server batches them, on copies of Orbit's
// event_deliveries and delivery_acks (the same columns and indexes), from
// the drain's log. No HTTP, no WebSocket, no frames, no grant checks, no
// session rows: what the brief's data model costs the database when the
// server costs nothing.
const (
	floorDatabase   = "bench_floor"
	floorRefillAt   = drainMaxPending / 8  // a refill once an eighth of the backlog is free, as the server
	floorClaimAbove = consumerCapacity / 8 // a claim once an eighth of a consumer's capacity is free
	floorAckBatch   = 256                  // the server's ACK batch bound
	floorAckFlush   = 2                    // and its ACK transactions at once
)

// floorResult is the schema floor's drain.
type floorResult struct {
	Events         int
	ParallelClaims bool
	Elapsed        time.Duration
	Rate           float64
	Cost           cost
	Claims         int64
	AckTxs         int64
	Refills        int64
}

// floorLease is one delivery leased by the floor's consumer c.
type floorLease struct {
	id     string
	epoch  uint64
	secret string
	c      *floorConsumer
}

type floorConsumer struct {
	session  string
	inFlight atomic.Int64
	freed    chan struct{} // a slot was freed
	above    uint64        // the claim floor: the highest sequence leased
}

// floorRun holds one run's shared state.
type floorRun struct {
	pool      *sql.DB
	log       *tasks.Module
	queueID   string
	subID     string
	events    int
	acked     atomic.Int64
	live      atomic.Int64 // deliveries created and not yet acknowledged
	roomFreed chan struct{}
	claims    atomic.Int64
	ackTxs    atomic.Int64
	refills   atomic.Int64
}

// runFloor drains n events of the drain's queue through the floor, with
// drainConsumers consumers of capacity consumerCapacity and max_pending
// drainMaxPending, as the drain row; the consumers' claims run one at a
// time, as E-6's default runs those of one application, unless
// parallelClaims.
func runFloor(ctx context.Context, e *env, n int, parallelClaims bool) (*floorResult, error) {
	queueID := e.cred.Queues["drain"]
	s, err := tasks.StreamGet(ctx, e.pool, queueID)
	if err != nil {
		return nil, err
	}
	if int(s.Head) < n {
		if err := prefill(ctx, e, "drain", n-int(s.Head)); err != nil {
			return nil, err
		}
	}
	// A second run uses the same tables with a subscription of its own.
	if _, err := e.admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+floorDatabase); err != nil {
		return nil, err
	}
	for _, table := range []string{"event_deliveries", "delivery_acks"} {
		if _, err := e.admin.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+floorDatabase+"."+table+" LIKE `"+orbitDatabase+"`."+table); err != nil {
			return nil, err
		}
	}
	if _, err := e.admin.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+floorDatabase+".cursors (id CHAR(32) NOT NULL PRIMARY KEY, sequence BIGINT UNSIGNED NOT NULL)"); err != nil {
		return nil, err
	}
	// The pool is on Orbit's database, whose log the floor reads with the
	// tasks module's own statements; the floor's tables are named with
	// their database.
	pool, err := db.Open(ctx, e.mysql.DSN(orbitDatabase))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	pool.SetMaxOpenConns(32)
	pool.SetMaxIdleConns(32)
	f := &floorRun{pool: pool, log: e.tasks, queueID: queueID, subID: db.NewID(), events: n, roomFreed: make(chan struct{}, 1)}
	if _, err := pool.ExecContext(ctx, "INSERT INTO "+floorDatabase+".cursors (id, sequence) VALUES (?, 0)", f.subID); err != nil {
		return nil, err
	}

	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	acks := batch.New(floorAckFlush, floorAckBatch, func(leases []floorLease) {
		if err := f.ack(runCtx, leases); err != nil {
			fail(err)
		}
	})
	var claimSlot sync.Locker = &sync.Mutex{} // E-6: one claim of an application at a time
	if parallelClaims {
		claimSlot = noLock{}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := f.materialize(runCtx); err != nil {
			fail(err)
		}
	})
	for range drainConsumers {
		c := &floorConsumer{session: db.NewID(), freed: make(chan struct{}, 1)}
		wg.Go(func() {
			if err := f.consume(runCtx, c, claimSlot, acks); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if err := acks.Wait(ctx); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, fmt.Errorf("schema floor: %w", firstErr)
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c := before.to(after)
	return &floorResult{Events: n, ParallelClaims: parallelClaims, Elapsed: c.Elapsed, Rate: float64(n) / c.Elapsed.Seconds(), Cost: c,
		Claims: f.claims.Load(), AckTxs: f.ackTxs.Load(), Refills: f.refills.Load()}, nil
}

func (f *floorRun) done() bool { return int(f.acked.Load()) >= f.events }

// materialize keeps the backlog filled as the server's materialiser does:
// up to max_pending at first, then whenever an eighth of it is free, in
// one transaction that scans the log after the cursor, inserts the
// deliveries and moves the cursor.
func (f *floorRun) materialize(ctx context.Context) error {
	var cursor uint64
	for int(cursor) < f.events {
		room := drainMaxPending - int(f.live.Load())
		if room < floorRefillAt && cursor > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-f.roomFreed:
			}
			continue
		}
		room = min(room, f.events-int(cursor))
		err := db.Tx(ctx, f.pool, func(tx *sql.Tx) error {
			refs, err := f.log.EventScan(ctx, tx, f.queueID, cursor, room)
			if err != nil {
				return err
			}
			if len(refs) == 0 {
				return fmt.Errorf("no events after %d", cursor)
			}
			now := db.Now()
			values := make([]string, 0, len(refs))
			args := make([]any, 0, 8*len(refs))
			for _, r := range refs {
				values = append(values, "(?, ?, ?, ?, ?, 1, 'PENDING', ?, ?, 0, 0, ?)")
				args = append(args, db.NewID(), f.subID, f.queueID, r.ID, r.Sequence, now, now, 10)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+floorDatabase+`.event_deliveries
				(id, subscription_id, queue_id, event_id, sequence, revision, state, created_at, available_at,
				 lease_epoch, attempts, attempt_budget) VALUES `+strings.Join(values, ", "), args...); err != nil {
				return err
			}
			last := refs[len(refs)-1].Sequence
			if _, err := tx.ExecContext(ctx, `UPDATE `+floorDatabase+`.cursors SET sequence = ? WHERE id = ?`, last, f.subID); err != nil {
				return err
			}
			db.OnCommit(tx, func() {
				cursor = last
				f.live.Add(int64(len(refs)))
			})
			return nil
		})
		if err != nil {
			return fmt.Errorf("refill: %w", err)
		}
		f.refills.Add(1)
	}
	return nil
}

// consume claims for c whenever an eighth of its capacity is free, one
// claim of the application at a time, and hands each lease to the ACK
// batcher at once (a handler that does nothing).
func (f *floorRun) consume(ctx context.Context, c *floorConsumer, claimSlot sync.Locker, acks *batch.Batcher[floorLease]) error {
	for !f.done() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		free := consumerCapacity - int(c.inFlight.Load())
		if free < floorClaimAbove {
			select {
			case <-ctx.Done():
			case <-c.freed:
			}
			continue
		}
		claimSlot.Lock()
		leases, err := f.claim(ctx, c, free)
		claimSlot.Unlock()
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(leases) == 0 {
			// The backlog is empty for now, or the rest is leased; the
			// next claim looks from the start again.
			c.above = 0
			select {
			case <-ctx.Done():
			case <-c.freed:
			case <-time.After(time.Millisecond):
			}
			continue
		}
		c.inFlight.Add(int64(len(leases)))
		for _, l := range leases {
			acks.Submit(l)
		}
	}
	return nil
}

// claim is the claim's own SQL: pick PENDING deliveries above c's floor in
// sequence order (SKIP LOCKED), lease them with one statement, each with
// its own secret, and read their events, in one transaction.
func (f *floorRun) claim(ctx context.Context, c *floorConsumer, free int) ([]floorLease, error) {
	var leases []floorLease
	var above uint64
	err := db.Tx(ctx, f.pool, func(tx *sql.Tx) error {
		leases, above = nil, c.above
		rows, err := tx.QueryContext(ctx, `SELECT id, sequence, lease_epoch FROM `+floorDatabase+`.event_deliveries
			WHERE subscription_id = ? AND state = 'PENDING' AND sequence > ? AND available_at <= ?
			ORDER BY sequence LIMIT ? FOR UPDATE SKIP LOCKED`, f.subID, c.above, db.Now(), free)
		if err != nil {
			return err
		}
		var sequences []uint64
		for rows.Next() {
			var l floorLease
			var sequence uint64
			if err := rows.Scan(&l.id, &sequence, &l.epoch); err != nil {
				rows.Close()
				return err
			}
			l.epoch++
			l.c = c
			leases = append(leases, l)
			sequences = append(sequences, sequence)
			above = max(above, sequence)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(leases) == 0 {
			return nil
		}
		now := db.Now()
		digests := make([]any, 0, 2*len(leases))
		ids := make([]any, 0, len(leases))
		for i := range leases {
			secret, digest := auth.NewLeaseSecret()
			leases[i].secret = secret
			digests = append(digests, leases[i].id, digest[:])
			ids = append(ids, leases[i].id)
		}
		args := append([]any{now.Add(30 * time.Second), c.session, now}, digests...)
		if _, err := tx.ExecContext(ctx, `UPDATE `+floorDatabase+`.event_deliveries SET state = 'LEASED', revision = revision + 1,
			lease_epoch = lease_epoch + 1, attempts = attempts + 1, lease_until = ?, lease_session_id = ?, leased_at = ?,
			lease_secret_digest = `+db.CaseByID(len(leases))+`
			WHERE id IN (`+db.Placeholders(len(leases))+`)`, append(args, ids...)...); err != nil {
			return err
		}
		events, err := f.log.EventsBySequence(ctx, tx, f.queueID, sequences)
		if err != nil {
			return err
		}
		if len(events) != len(sequences) {
			return fmt.Errorf("read %d events of %d", len(events), len(sequences))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.above = above
	f.claims.Add(1)
	return leases, nil
}

// ack is the ACK batch's own SQL: lock the deliveries in primary-key
// order, check each proof, mark them ACKED and write one audit record
// each, in one transaction; then free the consumers' slots and the
// backlog's room.
func (f *floorRun) ack(ctx context.Context, leases []floorLease) error {
	err := db.Tx(ctx, f.pool, func(tx *sql.Tx) error {
		ids := make([]any, 0, len(leases))
		for _, l := range leases {
			ids = append(ids, l.id)
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, lease_epoch, lease_secret_digest FROM `+floorDatabase+`.event_deliveries
			WHERE id IN (`+db.Placeholders(len(ids))+`) ORDER BY id FOR UPDATE`, ids...)
		if err != nil {
			return err
		}
		type proof struct {
			epoch  uint64
			digest []byte
		}
		held := make(map[string]proof, len(leases))
		for rows.Next() {
			var id string
			var p proof
			if err := rows.Scan(&id, &p.epoch, &p.digest); err != nil {
				rows.Close()
				return err
			}
			held[id] = p
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		now := db.Now()
		values := make([]string, 0, len(leases))
		audit := make([]any, 0, 5*len(leases))
		for _, l := range leases {
			p, ok := held[l.id]
			if !ok || p.epoch != l.epoch || !proofMatches(l.secret, p.digest) {
				return errors.New("a lease proof did not hold")
			}
			values = append(values, "(?, ?, ?, ?, ?)")
			audit = append(audit, l.id, f.subID, l.epoch, l.c.session, now)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+floorDatabase+`.event_deliveries SET state = 'ACKED', revision = revision + 1,
			acknowledged_at = ?, lease_until = NULL WHERE id IN (`+db.Placeholders(len(ids))+`)`, append([]any{now}, ids...)...); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+floorDatabase+`.delivery_acks (delivery_id, subscription_id, epoch, session_id, acknowledged_at)
			VALUES `+strings.Join(values, ", "), audit...)
		return err
	})
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	f.ackTxs.Add(1)
	f.acked.Add(int64(len(leases)))
	if f.live.Add(-int64(len(leases))) <= drainMaxPending-floorRefillAt {
		notify(f.roomFreed)
	}
	for _, l := range leases {
		l.c.inFlight.Add(-1)
		notify(l.c.freed)
	}
	return nil
}

// noLock lets claims run at once.
type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// notify wakes the one waiter of ch, if it is not already woken.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// proofMatches compares a lease secret's digest with the stored one in
// constant time, as the server does.
func proofMatches(secret string, stored []byte) bool {
	digest := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(digest[:], stored) == 1
}
