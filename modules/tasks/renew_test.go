package tasks

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"
)

// TestT5_RenewSurvivesADeadlock: a worker.ping's renewal that loses a
// deadlock against a completion is run again instead of failing the ping
// (which cost the worker its connection under load). The deadlock is made
// on purpose: another transaction holds the session's second attempt and
// then asks for the first, which the renewal holds while it waits for the
// second; that transaction has written more rows, so InnoDB rolls back the
// renewal.
func TestT5_RenewSurvivesADeadlock(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	f.submit(t, f.queues[0], 2, true, 3)
	session, err := f.store.WorkerSessionOpen(ctx, &WorkerSessionOpenParams{QueueID: f.queues[0], CredentialID: f.worker, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	leased, _, err := f.store.AttemptLease(ctx, session, f.grant(f.queues[0]), time.Minute)
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease: %v, %d assignments", err, len(leased))
	}
	attempts := []string{leased[0].AttemptID, leased[1].AttemptID}
	slices.Sort(attempts) // the renewal locks them in this order

	other, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.ExecContext(ctx, `UPDATE task_attempts SET lease_until = lease_until + INTERVAL 1 SECOND WHERE id = ?`, attempts[1]); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := TaskInsert(ctx, other, &TaskInsertParams{
			NamespaceID: f.scope.NamespaceID, QueueID: f.queues[0], CredentialID: "c", Input: []byte(`{}`), MaxAttempts: 1,
		}); err != nil {
			t.Fatal(err)
		}
	}

	type renewal struct {
		n   int
		err error
	}
	done := make(chan renewal, 1)
	go func() {
		n, err := f.store.AttemptRenew(ctx, session, time.Minute)
		done <- renewal{n, err}
	}()
	if !waitForBlockedRenewal(t, f.db, done) {
		r := <-done
		t.Fatalf("AttemptRenew returned %d, %v without waiting for the other transaction", r.n, r.err)
	}
	if _, err := other.ExecContext(ctx, `UPDATE task_attempts SET lease_until = lease_until + INTERVAL 1 SECOND WHERE id = ?`, attempts[0]); err != nil {
		t.Fatalf("the heavier transaction lost the deadlock: %v", err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 {
			t.Fatalf("AttemptRenew = %d, %v; want 2 leases renewed", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AttemptRenew did not return")
	}
}

// waitForBlockedRenewal returns true once the renewal's UPDATE has been
// running for a while (blocked by the other transaction's lock), or false
// when done is ready first. MariaDB does not list a transaction that waits
// before it has written anything in innodb_trx, so the process list is
// read instead.
func waitForBlockedRenewal[T any](t *testing.T, pool *sql.DB, done chan T) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if len(done) > 0 {
			return false
		}
		var n int
		if err := pool.QueryRow(`SELECT COUNT(*) FROM information_schema.processlist
			WHERE info LIKE 'UPDATE task_attempts FORCE INDEX%' AND time_ms >= 200`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewal never waited for the other transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestT5_RenewReadsOnlyItsSessionsAttempts: a renewal reads the session's
// own attempts through the session index, never a range over every
// running attempt (the expiry index), which made pings of different
// workers lock each other's attempts.
func TestT5_RenewReadsOnlyItsSessionsAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	now := time.Now().UTC()
	var id, selectType, table, typ string
	var possible, key, keyLen, ref, rows, extra sql.NullString
	if err := f.db.QueryRow(`EXPLAIN `+renewQuery, "0123456789abcdef0123456789abcdef", now).
		Scan(&id, &selectType, &table, &typ, &possible, &key, &keyLen, &ref, &rows, &extra); err != nil {
		t.Fatal(err)
	}
	if key.String != "ix_attempts_session" {
		t.Fatalf("the renewal reads through %q (%s), want ix_attempts_session", key.String, extra.String)
	}
}

// TestT5_RenewLocksInCompletionOrder: a renewal locks a session's leases
// in task order, as completions do, so a completion batch holding some of
// them never deadlocks with a ping. Two leases are picked whose task order
// is the reverse of their attempt order; a completion-like transaction
// locks the first by task, the renewal waits for it, and the transaction
// then locks the second without a deadlock. Locking in attempt order, the
// renewal held the second while it waited for the first: a deadlock on
// every such ping, which under a steady stream of completions lost all of
// db.Tx's attempts and failed the ping (UNAVAILABLE: leases could not be
// renewed; reconnect).
func TestT5_RenewLocksInCompletionOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	leased := leaseN(t, f, f.queues[0], 8)
	var first, second *Assignment // first by task, second by attempt
	for i := range leased {
		for j := range leased {
			a, b := &leased[i], &leased[j]
			if first == nil && a.Task.ID < b.Task.ID && a.AttemptID > b.AttemptID {
				first, second = a, b
			}
		}
	}
	if first == nil {
		t.Fatal("no two of 8 leases whose task order and attempt order differ")
	}
	var session string
	if err := f.db.QueryRow(`SELECT session_id FROM task_attempts WHERE id = ?`, first.AttemptID).Scan(&session); err != nil {
		t.Fatal(err)
	}

	completion, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer completion.Rollback()
	lock := func(id string) error {
		var state string
		return completion.QueryRowContext(ctx, `SELECT state FROM task_attempts WHERE id = ? FOR UPDATE`, id).Scan(&state)
	}
	if err := lock(first.AttemptID); err != nil {
		t.Fatal(err)
	}
	type renewal struct {
		n   int
		err error
	}
	done := make(chan renewal, 1)
	go func() {
		n, err := f.store.AttemptRenew(ctx, session, time.Minute)
		done <- renewal{n, err}
	}()
	if !waitForBlockedRenewal(t, f.db, done) {
		r := <-done
		t.Fatalf("AttemptRenew returned %d, %v without waiting for the completion", r.n, r.err)
	}
	if err := lock(second.AttemptID); err != nil {
		t.Fatalf("the completion could not lock its second attempt while a renewal waited: %v", err)
	}
	if err := completion.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != len(leased) {
			t.Fatalf("AttemptRenew = %d, %v; want %d leases renewed", r.n, r.err, len(leased))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AttemptRenew did not return")
	}
}
