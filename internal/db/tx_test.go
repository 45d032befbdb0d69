package db_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/dbtest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

// setup returns a pool on a fresh database with a table of two counters,
// both 0, and the database's DSN.
func setup(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := testdb.NewDSN(t)
	pool := open(t, dsn)
	for _, q := range []string{
		"CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO counters VALUES (1, 0), (2, 0)",
	} {
		if _, err := pool.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return pool, dsn
}

func counter(t *testing.T, pool *sql.DB, id int) int {
	t.Helper()
	var n int
	if err := pool.QueryRow("SELECT n FROM counters WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func countRows(t *testing.T, pool *sql.DB, id int) int {
	t.Helper()
	var n int
	if err := pool.QueryRow("SELECT COUNT(*) FROM counters WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTx_Commits(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter(t, pool, 1); n != 1 {
		t.Errorf("counter = %d, want 1", n)
	}
}

// TestTx_IsReadCommitted holds on a pool from Open even when the server
// defaults to REPEATABLE READ: a second read in the transaction sees a
// commit made in between.
func TestTx_IsReadCommitted(t *testing.T) {
	t.Parallel()
	plain, dsn := setup(t)
	pool := open(t, repeatableReadDSN(t, plain, dsn))
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		var before, after int
		if err := tx.QueryRow("SELECT n FROM counters WHERE id = 2").Scan(&before); err != nil {
			return err
		}
		if _, err := plain.Exec("UPDATE counters SET n = n + 1 WHERE id = 2"); err != nil {
			return err
		}
		if err := tx.QueryRow("SELECT n FROM counters WHERE id = 2").Scan(&after); err != nil {
			return err
		}
		if after != before+1 {
			t.Errorf("second read = %d, first = %d: the transaction does not see a committed change", after, before)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTx_RetriesDeadlock makes two transactions lock two rows in opposite
// order; InnoDB rolls one back, and Tx runs it again.
func TestTx_RetriesDeadlock(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var attempts atomic.Int32
	holding := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	transfer := func(me, first, second int) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			attempts.Add(1)
			if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = ?", first); err != nil {
				return err
			}
			// On the first attempt, wait until the other holds its first row.
			isFirst := false
			once[me].Do(func() { isFirst = true })
			if isFirst {
				close(holding[me])
				select {
				case <-holding[1-me]:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = ?", second)
			return err
		}
	}

	errs := make(chan error, 2)
	go func() { errs <- db.Tx(ctx, pool, transfer(0, 1, 2)) }()
	go func() { errs <- db.Tx(ctx, pool, transfer(1, 2, 1)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := attempts.Load(); got < 3 {
		t.Errorf("%d attempts in all, want at least 3 (one deadlock retried)", got)
	}
	if a, b := counter(t, pool, 1), counter(t, pool, 2); a != 2 || b != 2 {
		t.Errorf("counters = %d, %d; want 2, 2", a, b)
	}
}

// TestTx_RetriesLockWaitTimeout lets the first attempt time out on a row
// another transaction holds, then releases the row.
func TestTx_RetriesLockWaitTimeout(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, err := pool.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.Exec("UPDATE counters SET n = n + 10 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	firstFailed := make(chan struct{})
	released := make(chan error, 1)
	go func() {
		<-firstFailed
		released <- holder.Commit()
	}()

	var attempts atomic.Int32
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		n := attempts.Add(1)
		if _, err := tx.Exec("SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		_, err := tx.Exec("UPDATE counters SET n = n + 1 WHERE id = 1")
		if n == 1 {
			if !db.IsLockTimeout(err) {
				t.Errorf("first attempt: %v, want a lock wait timeout", err)
			}
			close(firstFailed)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if n := counter(t, pool, 1); n != 11 {
		t.Errorf("counter = %d, want 11", n)
	}
}

func TestTx_GivesUpAfterFiveAttempts(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	attempts := 0
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		attempts++
		return deadlock
	})
	if attempts != 5 {
		t.Errorf("%d attempts, want 5", attempts)
	}
	var me *mysql.MySQLError
	if !db.IsDeadlock(err) || !errors.As(err, &me) || me != deadlock {
		t.Errorf("error = %v, want one wrapping the deadlock", err)
	}
}

// TestN7_GaleraNodeNotReadyRetried: a Galera node that is not a synced
// member of a primary component refuses statements with 1047; Tx runs fn
// again, and the error counts as unavailability when retries run out.
func TestN7_GaleraNodeNotReadyRetried(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	notReady := &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}
	attempts := 0
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		attempts++
		if attempts == 1 {
			return notReady
		}
		_, err := tx.Exec("UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	})
	if err != nil || attempts != 2 || counter(t, pool, 1) != 1 {
		t.Errorf("after %d attempts: %v, counter %d; want 2 attempts and one increment", attempts, err, counter(t, pool, 1))
	}
	err = db.Tx(context.Background(), pool, func(tx *sql.Tx) error { return notReady })
	if !db.IsNodeNotReady(err) || !db.IsUnavailable(err) {
		t.Errorf("after five refusals: %v; want a node-not-ready error that is unavailability", err)
	}
}

func TestTx_StopsRetryingWhenContextEnds(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		attempts++
		cancel()
		return &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	})
	if attempts != 1 || !errors.Is(err, context.Canceled) || !db.IsLockTimeout(err) {
		t.Errorf("after %d attempts: %v; want 1 attempt and an error wrapping both causes", attempts, err)
	}
}

func TestTx_ReturnsOtherErrorsUnchanged(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	sentinel := errors.New("store: not allowed")
	attempts := 0
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		attempts++
		if _, err := tx.Exec("INSERT INTO counters VALUES (3, 0)"); err != nil {
			return err
		}
		return sentinel
	})
	if err != sentinel || attempts != 1 {
		t.Errorf("after %d attempts: %v; want 1 attempt and the error itself", attempts, err)
	}
	if countRows(t, pool, 3) != 0 {
		t.Error("the insert was not rolled back")
	}
}

func TestTx_DuplicateKeyIsReportedNotRetried(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	attempts := 0
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		attempts++
		_, err := tx.Exec("INSERT INTO counters VALUES (1, 0)")
		return err
	})
	if !db.IsDuplicateKey(err) || attempts != 1 {
		t.Errorf("after %d attempts: %v; want 1 attempt and a duplicate key error", attempts, err)
	}
	if db.IsDeadlock(err) || db.IsLockTimeout(err) {
		t.Errorf("%v is classified as a deadlock or lock timeout", err)
	}
}

func TestTx_PanicRollsBack(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	pool.SetMaxOpenConns(1) // the next transaction gets the same connection

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic to go on", r)
			}
		}()
		db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO counters VALUES (3, 0)"); err != nil {
				return err
			}
			panic("boom")
		})
	}()

	if countRows(t, pool, 3) != 0 {
		t.Error("the insert of the panicking transaction was not rolled back")
	}
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO counters VALUES (3, 0)")
		return err
	})
	if err != nil || countRows(t, pool, 3) != 1 {
		t.Errorf("transaction after the panic: %v", err)
	}
}

func TestTx_ContextEndedBeforeCommitRollsBack(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO counters VALUES (3, 0)")
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, db.ErrCommitUnknown) {
		t.Errorf("error = %v, want context.Canceled and not ErrCommitUnknown", err)
	}
	if countRows(t, pool, 3) != 0 {
		t.Error("the insert was committed")
	}
}

// TestTx_CommitOutcomeUnknown cuts the connection while COMMIT is in flight,
// once before the server gets it and once after it committed: the caller
// cannot tell the two apart and gets ErrCommitUnknown, without a retry.
func TestTx_CommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		mode      dbtest.CutMode
		committed int
	}{
		"CutBeforeCommit": {dbtest.CutBeforeCommit, 0},
		"CutAfterCommit":  {dbtest.CutAfterCommit, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			direct, dsn := setup(t)
			cutter := dbtest.NewCommitCutter(t, dsn)
			pool := open(t, cutter.DSN(dsn))

			cut := cutter.CutNextCommit(tc.mode)
			attempts := 0
			err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
				attempts++
				_, err := tx.Exec("INSERT INTO counters VALUES (3, 0)")
				return err
			})
			<-cut
			if !errors.Is(err, db.ErrCommitUnknown) {
				t.Fatalf("error = %v, want ErrCommitUnknown", err)
			}
			if attempts != 1 {
				t.Errorf("%d attempts, want 1: an unknown commit is never retried", attempts)
			}
			if got := countRows(t, direct, 3); got != tc.committed {
				t.Errorf("%d rows committed, want %d", got, tc.committed)
			}
			// The pool recovers: the next transaction commits.
			err = db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
				_, err := tx.Exec("INSERT INTO counters VALUES (4, 0)")
				return err
			})
			if err != nil || countRows(t, direct, 4) != 1 {
				t.Errorf("transaction after the cut: %v", err)
			}
		})
	}
}
