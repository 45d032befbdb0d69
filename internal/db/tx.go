package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// maxAttempts bounds how often Tx runs a transaction that keeps losing
	// deadlocks or lock waits.
	maxAttempts = 5

	// retryBase is the backoff before the second attempt; it doubles for
	// each further attempt and varies by ±50%.
	retryBase = 5 * time.Millisecond
)

// ErrCommitUnknown is returned by Tx, wrapping the driver's error, when the
// connection failed while COMMIT was in flight: the server may or may not
// have committed, and nobody can tell from the client side. It is never
// retried. A caller that gets it must find out from the database whether
// the change is there (for example by reading back the row it inserted,
// whose ID it chose with NewID) before it reports success or failure, and
// must never report the write as failed outright.
var ErrCommitUnknown = errors.New("db: commit outcome unknown")

// Tx runs fn in a READ COMMITTED transaction and commits it.
//
// If fn or COMMIT fails with a deadlock (1213, which is also how Galera
// reports a certification conflict), a lock wait timeout (1205) or a Galera
// node that is not ready (1047), Tx rolls back and runs fn again, up to five attempts in all, with a
// jittered backoff of 5 ms doubling per attempt; fn must therefore have no
// effects outside the transaction. If fn returns any other error, Tx rolls
// back and returns that error as it is. If fn panics, Tx rolls back and the
// panic goes on. If the connection fails during COMMIT, Tx returns an error
// that wraps ErrCommitUnknown. If ctx ends before COMMIT is sent, Tx rolls
// back and returns ctx's error.
//
// Each attempt's outcome goes to the pool's ObserveTx function, and
// functions fn registered with OnCommit run after the COMMIT.
//
// db must be a pool made by Open: the transaction takes its connections'
// session level, READ COMMITTED, rather than setting it with one more round
// trip per transaction.
func Tx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := runTx(ctx, db, fn)
		if err == nil {
			observe(db, TxCommit)
			return nil
		}
		if errors.Is(err, ErrCommitUnknown) {
			observe(db, TxCommitUnknown)
			return err
		}
		retryable := IsDeadlock(err) || IsLockTimeout(err) || IsNodeNotReady(err)
		if !retryable {
			observe(db, TxRollback)
			return err
		}
		if attempt == maxAttempts {
			observe(db, TxRollback)
			return fmt.Errorf("db: transaction failed %d times: %w", attempt, err)
		}
		timer := time.NewTimer(backoff(attempt))
		select {
		case <-ctx.Done():
			timer.Stop()
			observe(db, TxRollback)
			return fmt.Errorf("db: retry: %w (last attempt: %w)", ctx.Err(), err)
		case <-timer.C:
		}
		observe(db, TxRetriedDeadlock)
	}
}

// runTx runs fn in one transaction. The deferred Rollback undoes everything
// when fn fails or panics; after a commit it does nothing.
func runTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	// Every connection of a pool from Open is READ COMMITTED for its whole
	// session, so the transaction takes the session's level; asking for it
	// here would cost a SET TRANSACTION round trip per transaction.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("db: begin: %w", err)
	}
	defer tx.Rollback()
	h := &hooks{pool: db}
	commitHooks.Store(tx, h)
	defer commitHooks.Delete(tx)

	if err := fn(tx); err != nil {
		return err
	}
	// database/sql rolls back a transaction whose context has ended; check
	// first so that this case is reported as what it is, not as an unknown
	// commit.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("db: commit not sent: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return commitError(err)
	}
	runHooks(h)
	return nil
}

// commitError classifies an error from COMMIT. An error the server sent
// means the transaction was rolled back, unless the server said it was
// shutting down or the connection was killed. Any other error (a broken or
// closed connection, a timeout, a cancelled context) leaves the outcome
// unknown.
func commitError(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1053, // ER_SERVER_SHUTDOWN
			1317, // ER_QUERY_INTERRUPTED
			1927, // ER_CONNECTION_KILLED (MariaDB)
			4031: // ER_CLIENT_INTERACTION_TIMEOUT (MySQL)
		default:
			return fmt.Errorf("db: commit: %w", err)
		}
	}
	return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
}

// backoff returns the wait after the given failed attempt (1-based):
// retryBase·2^(attempt-1), varied uniformly by ±50%.
func backoff(attempt int) time.Duration {
	d := retryBase << (attempt - 1)
	return d/2 + rand.N(d)
}
