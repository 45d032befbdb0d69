// Package testdb gives each test its own database on a real MySQL-compatible
// server.
//
// When ORBIT_TEST_MYSQL_DSN is set, databases are created on that server (its
// user needs CREATE and DROP; the database part of the DSN is ignored).
// Otherwise the first test that asks starts one throwaway server for the
// whole test binary with internal/mysqld, in a temporary directory. If no
// server binary is installed, the test fails with what to install; it is
// never skipped.
//
// The platform migrations run once per test binary into a template database;
// each test then gets a copy of its tables, which takes milliseconds. They are
// the migrations of every module linked into the test binary
// (modules.Migrations), so a package whose tests do not link every module
// already adds a _test.go file with
//
//	import _ "github.com/orbitrun/orbit/modules/all"
//
// (an external test package, package x_test, where x is a module). Every
// package that uses testdb stops the server, removes its files and checks
// that its tests leaked no goroutine (F-7) from TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// A TestMain that does more afterwards calls Run, then CheckLeaks.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/mysqld"
	"github.com/orbitrun/orbit/modules"
)

// EnvDSN names the environment variable with the DSN of a server to use
// instead of starting one.
const EnvDSN = "ORBIT_TEST_MYSQL_DSN"

const (
	// setupTimeout bounds starting the server and migrating the template.
	setupTimeout = 2 * time.Minute

	// opTimeout bounds creating or dropping one test database.
	opTimeout = 30 * time.Second
)

// harness is the server and template database shared by the tests of one
// test binary.
type harness struct {
	runID    string         // names this test binary's databases and lock
	dir      string         // temporary directory of the server; empty with EnvDSN
	dirLock  *os.File       // holds the lock that marks dir as in use
	server   *mysqld.Server // nil with EnvDSN
	base     *mysql.Config  // the server, without a database
	admin    *sql.DB        // creates and drops databases
	runLock  *sql.Conn      // holds the run lock on a shared server; nil otherwise
	template string         // migrated template database
	tables   []string       // tables of the template
}

var (
	mu      sync.Mutex
	started bool // setup ran, successfully or not
	shared  *harness
	failed  error // why setup failed
	seq     atomic.Int64
)

// get returns the harness, setting it up on first use. A failed setup fails
// every test that asks, with the same error.
func get(t testing.TB) *harness {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		shared, failed = setup()
	}
	if failed != nil {
		t.Fatal(failed)
	}
	return shared
}

// New returns a pool (made by internal/db.Open) on a fresh database that
// holds the platform schema, private to the test. The pool is closed and the
// database dropped when the test ends.
func New(t testing.TB) *sql.DB {
	t.Helper()
	dsn := NewDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := db.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// NewDSN is New for tests that open the database themselves, for example
// through a server process: it returns the DSN of a fresh, migrated database
// that is dropped when the test ends.
func NewDSN(t testing.TB) string {
	t.Helper()
	h := get(t)
	name := h.createDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, table := range h.tables {
		q := fmt.Sprintf("CREATE TABLE `%s`.`%s` LIKE `%s`.`%s`", name, table, h.template, table)
		if _, err := h.admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("testdb: copy table %s: %v", table, err)
		}
	}
	q := fmt.Sprintf("INSERT INTO `%s`.schema_migrations SELECT * FROM `%s`.schema_migrations", name, h.template)
	if _, err := h.admin.ExecContext(ctx, q); err != nil {
		t.Fatalf("testdb: copy schema_migrations: %v", err)
	}
	return h.dsn(name)
}

// NewEmpty returns the DSN of a fresh database without any table, dropped
// when the test ends: for migration tests, and for schemas that are not the
// platform's.
func NewEmpty(t testing.TB) string {
	t.Helper()
	h := get(t)
	return h.dsn(h.createDatabase(t))
}

// Main runs the tests, then stops the server and removes its files, checks
// for leaked goroutines when the tests passed, and exits with the tests'
// exit code. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(CheckLeaks(Run(m)))
}

// CheckLeaks returns code, or 1 when code is 0 and a goroutine is still
// running that the tests started and did not stop (goleak). Keep-alive
// connections of http.DefaultClient to the test servers are closed first:
// they end with the servers and are not leaks of the code under test.
func CheckLeaks(code int) int {
	if code != 0 {
		return code
	}
	http.DefaultClient.CloseIdleConnections()
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}

// Run is Main without the exit: it runs the tests, cleans up and returns the
// exit code, for a TestMain that does more afterwards.
func Run(m *testing.M) int {
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// createDatabase creates an empty database for the test and drops it when
// the test ends.
func (h *harness) createDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t_%s_%d", h.runID, seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := h.admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` "+charset); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if _, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	return name
}

// charset is the default character set of every database testdb creates,
// the same as orbit dev's.
const charset = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

// dsn returns the DSN of database name on the harness's server.
func (h *harness) dsn(name string) string {
	cfg := h.base.Clone()
	cfg.DBName = name
	return cfg.FormatDSN()
}

// setup starts or connects to the server and migrates the template
// database. On failure it undoes what it did.
func setup() (_ *harness, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	h := &harness{runID: randomHex(6)}
	defer func() {
		if err != nil {
			if cerr := h.close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()

	if dsn := os.Getenv(EnvDSN); dsn != "" {
		if h.base, err = mysql.ParseDSN(dsn); err != nil {
			return nil, fmt.Errorf("testdb: %s: %v", EnvDSN, err)
		}
		h.base.DBName = ""
	} else {
		if err := h.startServer(ctx); err != nil {
			return nil, err
		}
	}

	if h.admin, err = db.Open(ctx, h.base.FormatDSN()); err != nil {
		return nil, fmt.Errorf("testdb: %w", err)
	}
	// On a Galera node GET_LOCK, which marks a run as alive, is local to
	// the node (MariaDB 10.11 grants one name on every node at once) or
	// refused (other versions), so it cannot tell other nodes' runs. A
	// Galera cluster for tests (make test-galera) lives only as long as its
	// run: there nothing is abandoned to drop, and nothing is marked.
	if !wsrepOn(ctx, h.admin) {
		if err := h.claimRun(ctx); err != nil {
			return nil, err
		}
		if h.server == nil {
			h.dropAbandoned(ctx)
		}
	}

	h.template = "orbit_tpl_" + h.runID
	if _, err := h.admin.ExecContext(ctx, "CREATE DATABASE `"+h.template+"` "+charset); err != nil {
		return nil, fmt.Errorf("testdb: create template database: %w", err)
	}
	tpl, err := db.Open(ctx, h.dsn(h.template))
	if err != nil {
		return nil, fmt.Errorf("testdb: %w", err)
	}
	defer tpl.Close()
	set, err := schema()
	if err != nil {
		return nil, err
	}
	if _, err := migrate.Up(ctx, tpl, set); err != nil {
		return nil, fmt.Errorf("testdb: migrate template: %w", err)
	}
	rows, err := h.admin.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME`, h.template)
	if err != nil {
		return nil, fmt.Errorf("testdb: list template tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("testdb: list template tables: %w", err)
		}
		h.tables = append(h.tables, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("testdb: list template tables: %w", err)
	}
	return h, nil
}

// schema returns the migrations of the modules linked into the test binary,
// or an error saying what to import when that is not every module.
func schema() (migrate.Set, error) {
	const hint = `link every module into the test binary: a _test.go file with import _ "github.com/orbitrun/orbit/modules/all"`
	set := modules.Migrations()
	if len(modules.Registered()) == 0 {
		return set, fmt.Errorf("testdb: no module is registered; %s", hint)
	}
	if _, err := migrate.Load(set); err != nil {
		return set, fmt.Errorf("testdb: %w; %s", err, hint)
	}
	return set, nil
}

// startServer starts a throwaway server in a new temporary directory.
func (h *harness) startServer(ctx context.Context) error {
	removeAbandonedDirs()
	dir, err := os.MkdirTemp("", tempDirPrefix)
	if err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	h.dir = dir
	if h.dirLock, err = lockDir(dir); err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	h.server, err = mysqld.Start(ctx, mysqld.Options{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		return fmt.Errorf("testdb: start a database server (or set %s): %w", EnvDSN, err)
	}
	h.base, err = mysql.ParseDSN(h.server.DSN(""))
	if err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	return nil
}

// teardown drops the template database, stops the server and removes its
// files. It does nothing if no test asked for a database.
func teardown() error {
	mu.Lock()
	defer mu.Unlock()
	h := shared
	shared = nil
	if h == nil {
		return nil
	}
	return h.close()
}

// close releases everything the harness holds; it is safe on a harness that
// was set up only in part.
func (h *harness) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if h.admin != nil {
		if h.template != "" && h.server == nil {
			if _, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+h.template+"`"); err != nil {
				errs = append(errs, fmt.Errorf("testdb: drop template database: %w", err))
			}
		}
		if h.runLock != nil {
			h.runLock.Close()
		}
		h.admin.Close()
	}
	if h.server != nil {
		if err := h.server.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("testdb: %w", err))
		}
	}
	if h.dir != "" {
		if err := os.RemoveAll(h.dir); err != nil {
			errs = append(errs, fmt.Errorf("testdb: %w", err))
		}
	}
	if h.dirLock != nil {
		h.dirLock.Close()
	}
	return errors.Join(errs...)
}

// randomHex returns n random bytes as lowercase hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
