package db_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/dbtest"
)

// outcomes records what ObserveTx reports for a pool.
type outcomes struct {
	mu   sync.Mutex
	seen []string
}

func observeOutcomes(t *testing.T, pool *sql.DB) *outcomes {
	o := &outcomes{}
	stop := db.ObserveTx(pool, func(s string) {
		o.mu.Lock()
		o.seen = append(o.seen, s)
		o.mu.Unlock()
	})
	t.Cleanup(stop)
	return o
}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}

// TestO2_TxOutcomesAreObserved: every attempt reports one outcome, the
// source of orbit_db_transactions_total.
func TestO2_TxOutcomesAreObserved(t *testing.T) {
	t.Parallel()
	pool, dsn := setup(t)
	seen := observeOutcomes(t, pool)
	ctx := context.Background()

	_ = db.Tx(ctx, pool, func(tx *sql.Tx) error { _, err := tx.Exec("UPDATE counters SET n = n + 1 WHERE id = 1"); return err })
	_ = db.Tx(ctx, pool, func(tx *sql.Tx) error { return errors.New("refused") })
	deadlocks := 0
	_ = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		if deadlocks < 2 {
			deadlocks++
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return nil
	})
	want := []string{db.TxCommit, db.TxRollback, db.TxRetriedDeadlock, db.TxRetriedDeadlock, db.TxCommit}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}

	// A cut COMMIT is commit_unknown, on the proxied pool only.
	cutter := dbtest.NewCommitCutter(t, dsn)
	cutPool := open(t, cutter.DSN(dsn))
	cutSeen := observeOutcomes(t, cutPool)
	cut := cutter.CutNextCommit(dbtest.CutAfterCommit)
	err := db.Tx(ctx, cutPool, func(tx *sql.Tx) error { _, err := tx.Exec("INSERT INTO counters VALUES (5, 0)"); return err })
	<-cut
	if !errors.Is(err, db.ErrCommitUnknown) {
		t.Fatalf("error = %v, want ErrCommitUnknown", err)
	}
	if got := cutSeen.list(); !slices.Equal(got, []string{db.TxCommitUnknown}) {
		t.Errorf("outcomes on the cut pool %v, want [commit_unknown]", got)
	}
	if got := seen.list(); len(got) != len(want) {
		t.Errorf("the first pool saw the other pool's transaction: %v", got)
	}
}

// TestO2_OnCommitRunsOnlyAfterCommit: functions registered in a rolled back
// or retried attempt never run; those of the committed attempt run once.
func TestO2_OnCommitRunsOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	ran := 0
	attempts := 0
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		attempts++
		db.OnCommit(tx, func() { ran++ })
		if attempts == 1 {
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return nil
	})
	if err != nil || attempts != 2 || ran != 1 {
		t.Errorf("err %v, %d attempts, hook ran %d times; want nil, 2, 1", err, attempts, ran)
	}
	ran = 0
	_ = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		db.OnCommit(tx, func() { ran++ })
		return errors.New("refused")
	})
	if ran != 0 {
		t.Errorf("hook of a rolled back transaction ran %d times", ran)
	}
}

// TestTxValueIsOnePerAttempt: the writes of one transaction attempt share
// one value (made once), a retried attempt starts with a new one, and Pool
// names the pool the transaction runs on.
func TestTxValueIsOnePerAttempt(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	type key struct{}
	made := 0
	var values []*int
	attempts := 0
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		attempts++
		if db.Pool(tx) != pool {
			t.Error("Pool did not name the transaction's pool")
		}
		mk := func() *int { made++; return new(int) }
		a, b := db.TxValue(tx, key{}, mk), db.TxValue(tx, key{}, mk)
		if a != b {
			t.Error("two calls in one attempt made two values")
		}
		values = append(values, a)
		if attempts == 1 {
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return nil
	})
	if err != nil || attempts != 2 || made != 2 || values[0] == values[1] {
		t.Errorf("err %v, %d attempts, %d values made; want nil, 2 attempts, one value each", err, attempts, made)
	}
}
