package galera_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/testkit/galera"
)

// TestN6_ClusterKillAndRestartNode starts a cluster of its own, checks that
// a write through node 0 is read on node 2, kills node 2 with SIGKILL while
// node 0 goes on writing, restarts it and checks it caught up; Stop leaves
// no directory behind. It starts three more servers, so it runs only where
// a Galera cluster is expected (ORBIT_TEST_GALERA set, as make test-galera
// does).
func TestN6_ClusterKillAndRestartNode(t *testing.T) {
	if os.Getenv(galera.EnvNodes) == "" {
		t.Skip("starts a Galera cluster: runs when ORBIT_TEST_GALERA is set (make test-galera)")
	}
	ctx := context.Background()
	began := time.Now()
	c, err := galera.Start(ctx, galera.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 nodes synced in %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			c.Stop(ctx)
		}
	}()
	open := func(i int) *sql.DB {
		db, err := sql.Open("mysql", c.DSN(i, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	count := func(db *sql.DB) int {
		t.Helper()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM n6.t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	node0 := open(0)
	for _, q := range []string{
		"CREATE DATABASE n6",
		"CREATE TABLE n6.t (id INT PRIMARY KEY)",
		"INSERT INTO n6.t VALUES (1)",
	} {
		if _, err := node0.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	node2 := open(2)
	if n := count(node2); n != 1 {
		t.Errorf("node 2 sees %d rows, want 1", n)
	}

	c.Kill(2)
	if _, err := node0.ExecContext(ctx, "INSERT INTO n6.t VALUES (2)"); err != nil {
		t.Fatalf("write with node 2 dead: %v", err)
	}
	began = time.Now()
	if err := c.WaitPrimary(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("nodes 0 and 1 a primary component of 2 after %s", time.Since(began).Round(time.Millisecond))
	if st, err := c.NodeStatus(ctx, 0); err != nil || st.ClusterSize != 2 || st.ClusterState != "Primary" {
		t.Errorf("node 0 after the kill: %+v, %v; want a primary component of 2", st, err)
	}
	began = time.Now()
	if err := c.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 2 rejoined in %s", time.Since(began).Round(time.Millisecond))
	if n := count(node2); n != 2 {
		t.Errorf("node 2 after its restart sees %d rows, want 2", n)
	}

	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(c.LogFile(0)); !os.IsNotExist(err) {
		t.Errorf("cluster directory left behind: %v", err)
	}
}
