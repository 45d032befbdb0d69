package db_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/galera"
)

// galeraNodes returns pools on a fresh database on nodes 0 and 1 of the
// cluster named by ORBIT_TEST_GALERA, with a table of one counter at 0, or
// skips the test without a cluster.
func galeraNodes(t *testing.T) (node0, node1 *sql.DB) {
	t.Helper()
	dsns := galera.NodesFromEnv(t, 2)
	ctx := context.Background()
	name := fmt.Sprintf("n7_%d", time.Now().UnixNano())
	admin := open(t, dsns[0])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS `" + name + "`") })
	withDB := func(dsn string) string {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		return cfg.FormatDSN()
	}
	node0 = open(t, withDB(dsns[0]))
	for _, q := range []string{
		"CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO counters VALUES (1, 0)",
	} {
		if _, err := node0.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Node 1 applies what node 0 commits a moment later: wait for it
	// before opening a pool on a database it may not have yet.
	other := open(t, dsns[1])
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 15"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+name+"`.counters").Scan(&n); err != nil || n != 1 {
		t.Fatalf("node 1 has %d counters (%v), want 1", n, err)
	}
	return node0, open(t, withDB(dsns[1]))
}

// catchUp waits until node has applied everything committed anywhere in
// the cluster before the call (wsrep_sync_wait).
func catchUp(t *testing.T, node *sql.DB) {
	t.Helper()
	conn, err := node.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if _, err := conn.ExecContext(context.Background(), "SET SESSION wsrep_sync_wait = 1"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(context.Background(), "SELECT n FROM counters WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "SET SESSION wsrep_sync_wait = 0"); err != nil {
		t.Fatal(err)
	}
}

// TestN7_CertificationConflictRetried: Galera's row locks are local to a
// node, so two transactions on two nodes that update the same row both get
// their lock; the one that replicates second is aborted (brute-force abort
// by the applier, or a certification failure at COMMIT), and MariaDB
// reports it as a deadlock, 1213. db.Tx retries it like any deadlock, and
// the retry commits.
func TestN7_CertificationConflictRetried(t *testing.T) {
	node0, node1 := galeraNodes(t)
	ctx := context.Background()

	// The raw conflict, to record what the server says.
	tx, err := node0.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := node1.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 1"); err != nil {
		t.Fatalf("update on node 1: %v", err)
	}
	catchUp(t, node0)
	err = tx.Commit()
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		t.Fatalf("COMMIT on node 0 after a conflicting commit on node 1 = %v, want a server error", err)
	}
	t.Logf("conflict on COMMIT: error %d (%s): %s", me.Number, string(me.SQLState[:]), me.Message)
	if !db.IsDeadlock(err) {
		t.Errorf("conflict error %d is not a deadlock to Tx", me.Number)
	}

	// db.Tx retries it.
	var retried atomic.Int64
	stop := db.ObserveTx(node0, func(outcome string) {
		if outcome == db.TxRetriedDeadlock {
			retried.Add(1)
		}
	})
	defer stop()
	attempts := 0
	err = db.Tx(ctx, node0, func(tx *sql.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		if attempts == 1 {
			if _, err := node1.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 1"); err != nil {
				return fmt.Errorf("update on node 1: %w", err)
			}
			catchUp(t, node0)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Tx with a conflict on its first attempt: %v", err)
	}
	if attempts != 2 || retried.Load() != 1 {
		t.Errorf("Tx ran %d attempts, %d retried; want 2 and 1", attempts, retried.Load())
	}
	catchUp(t, node1)
	var n int
	if err := node1.QueryRowContext(ctx, "SELECT n FROM counters WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 111 {
		t.Errorf("counter = %d on node 1, want 111: 10 and 100 from node 1, one increment from node 0's retried Tx", n)
	}
}
