package testdb

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/modules"
)

func TestMain(m *testing.M) {
	os.Exit(CheckLeaks(Run(m)))
}

// databaseName returns the name of the database a DSN points at.
func databaseName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DBName
}

// exists reports whether the database exists on the shared server.
func exists(t *testing.T, name string) bool {
	t.Helper()
	var n int
	err := shared.admin.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func tables(t *testing.T, pool *sql.DB) []string {
	t.Helper()
	rows, err := pool.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func TestNew_IsFullyMigrated(t *testing.T) {
	t.Parallel()
	pool := New(t)
	if err := migrate.Check(context.Background(), pool, modules.Migrations()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	got := tables(t, pool)
	if len(got) < 2 || len(got) != len(shared.tables) {
		t.Errorf("tables = %v, want those of the template: %v", got, shared.tables)
	}
	// Indexes and comments come along with CREATE TABLE ... LIKE.
	var comment string
	if err := pool.QueryRow(`SELECT TABLE_COMMENT FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'namespaces'`).Scan(&comment); err != nil || comment == "" {
		t.Errorf("namespaces comment = %q, %v", comment, err)
	}
}

func TestNew_DatabasesArePrivate(t *testing.T) {
	t.Parallel()
	a, b := New(t), New(t)
	if _, err := a.Exec("INSERT INTO namespaces (id, name, created_at) VALUES (?, 'only-in-a', UTC_TIMESTAMP(6))",
		"0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow("SELECT COUNT(*) FROM namespaces").Scan(&n); err != nil || n != 0 {
		t.Errorf("second database sees %d namespaces (%v), want 0", n, err)
	}
}

func TestNewEmpty_HasNoTables(t *testing.T) {
	t.Parallel()
	dsn := NewEmpty(t)
	pool, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := tables(t, pool); len(got) != 0 {
		t.Errorf("tables = %v, want none", got)
	}
}

func TestNames_UseOnlyLowercaseDigitsAndUnderscore(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[a-z0-9_]+$`)
	get(t)
	for _, name := range []string{databaseName(t, NewDSN(t)), databaseName(t, NewEmpty(t)), shared.template} {
		if !valid.MatchString(name) || len(name) > 64 {
			t.Errorf("database name %q", name)
		}
	}
}

func TestDatabasesAreDroppedWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	var names []string
	t.Run("Use", func(t *testing.T) {
		names = append(names, databaseName(t, NewDSN(t)), databaseName(t, NewEmpty(t)))
		New(t)
		for _, name := range names {
			if !exists(t, name) {
				t.Fatalf("database %s does not exist during the test", name)
			}
		}
	})
	for _, name := range names {
		if exists(t, name) {
			t.Errorf("database %s still exists after the test", name)
		}
	}
}

func TestRemoveAbandonedDirs(t *testing.T) {
	t.Parallel()
	old := time.Now().Add(-2 * minAbandonedAge)
	mkdir := func(t *testing.T) string {
		dir, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}

	abandoned := mkdir(t)
	if err := os.WriteFile(filepath.Join(abandoned, lockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inUse := mkdir(t)
	f, err := lockDir(inUse)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	young := mkdir(t)
	for _, dir := range []string{abandoned, inUse} {
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
	}

	removeAbandonedDirs()
	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("abandoned directory still there: %v", err)
	}
	for _, dir := range []string{inUse, young} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("directory %s removed: %v", dir, err)
		}
	}
}

func TestDropAbandonedDatabases(t *testing.T) {
	t.Parallel()
	h := get(t)
	ctx := context.Background()
	const deadRun, liveRun = "0000deadbeef", "00000000a11e"
	conn, err := h.admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "DO GET_LOCK(?, 0)", runLockName(liveRun)); err != nil {
		t.Fatal(err)
	}
	names := []string{"t_" + deadRun + "_1", "orbit_tpl_" + deadRun, "t_" + liveRun + "_1", "t_not_ours"}
	for _, name := range names {
		if _, err := h.admin.Exec("CREATE DATABASE `" + name + "`"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.admin.Exec("DROP DATABASE IF EXISTS `" + name + "`") })
	}
	ownDSN := NewDSN(t)

	h.dropAbandoned(ctx)
	for name, want := range map[string]bool{
		names[0]: false, names[1]: false, names[2]: true, names[3]: true,
		databaseName(t, ownDSN): true, h.template: true,
	} {
		if got := exists(t, name); got != want {
			t.Errorf("database %s exists = %v, want %v", name, got, want)
		}
	}
}
