package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/mysqld"
	"github.com/orbitrun/orbit/modules"
)

// one temporary server for the whole test binary, the platform in
// orbit_test and the receiver in its own orbit_receiver_test. Tests share
// both databases; each one receives under its own consumer name and queue,
// which is exactly the Inbox's scope, so they run in parallel.

const (
	// platformDatabase and receiverDatabase are the names seed 000 §6 gives.
	platformDatabase = "orbit_test"
	receiverDatabase = "orbit_receiver_test"

	// receiverSchemaPath is the receiver's initial DDL, as `receiver init`
	// runs it.
	receiverSchemaPath = "../../examples/result-inbox/schema.sql"

	// envDSN names a server to use instead of starting one; its user needs
	// CREATE, DROP and TRIGGER. The database part of the DSN is ignored.
	envDSN = "ORBIT_TEST_MYSQL_DSN"

	// runLockName is held (GET_LOCK) on the server while a test binary of
	// this package uses the two databases, so that two runs against one
	// shared server cannot drop each other's data.
	runLockName = "orbit_integration_run"

	// tempDirPrefix starts the name of the directory of a private server;
	// ownerLockFile in it is locked while its test binary runs.
	tempDirPrefix = "orbit-integration-"
	ownerLockFile = "owner.lock"

	setupTimeout    = 2 * time.Minute
	teardownTimeout = time.Minute
)

// env is what TestMain prepared; tests only read it.
var env struct {
	platform    *sql.DB // orbit_test, migrated, opened by internal/db
	receiver    *sql.DB // orbit_receiver_test, opened as a receiver would
	receiverDSN string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run sets up, runs the tests, tears down and checks for leaked
// goroutines. A failed setup fails the binary; it never skips.
func run(m *testing.M) int {
	h := &harness{}
	if err := h.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: setup:", err)
		if cerr := h.close(); cerr != nil {
			fmt.Fprintln(os.Stderr, "integration: teardown:", cerr)
		}
		return 1
	}
	code := m.Run()
	if err := h.close(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// harness owns the server (when it started one) and the two databases.
type harness struct {
	dir       string         // private server's directory; empty with envDSN
	dirLock   *os.File       // marks dir as in use
	server    *mysqld.Server // nil with envDSN
	base      *mysql.Config  // the server, without a database
	admin     *sql.DB        // creates and drops the databases
	runLock   *sql.Conn      // holds runLockName
	databases []string       // created, dropped by close
}

func (h *harness) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if dsn := os.Getenv(envDSN); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return fmt.Errorf("%s: %v", envDSN, err)
		}
		h.base = cfg
	} else if err := h.startServer(ctx); err != nil {
		return err
	}
	h.base.DBName = ""
	h.base.ParseTime = true
	h.base.Loc = time.UTC

	var err error
	if h.admin, err = db.Open(ctx, h.base.FormatDSN()); err != nil {
		return err
	}
	if h.runLock, err = h.admin.Conn(ctx); err != nil {
		return err
	}
	var got sql.NullInt64
	if err := h.runLock.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", runLockName).Scan(&got); err != nil {
		return fmt.Errorf("take run lock: %w", err)
	}
	if got.Int64 != 1 {
		h.runLock.Close()
		h.runLock = nil
		return fmt.Errorf("another integration run holds %s on this server and uses %s and %s", runLockName, platformDatabase, receiverDatabase)
	}
	for _, name := range []string{platformDatabase, receiverDatabase} {
		// A database left by a run that crashed is ours to replace: the
		// run lock says nobody uses it now.
		if _, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			return fmt.Errorf("drop leftover %s: %w", name, err)
		}
		if _, err := h.admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		h.databases = append(h.databases, name)
	}

	if env.platform, err = db.Open(ctx, h.dsn(platformDatabase)); err != nil {
		return err
	}
	if _, err := migrate.Up(ctx, env.platform, modules.Migrations()); err != nil {
		return fmt.Errorf("migrate %s: %w", platformDatabase, err)
	}

	env.receiverDSN = h.dsn(receiverDatabase)
	if env.receiver, err = openReceiver(env.receiverDSN); err != nil {
		return err
	}
	schema, err := os.ReadFile(receiverSchemaPath)
	if err != nil {
		return fmt.Errorf("receiver schema: %w", err)
	}
	stmts := schemaStatements(string(schema))
	if len(stmts) == 0 {
		return fmt.Errorf("receiver schema %s holds no statement", receiverSchemaPath)
	}
	for _, stmt := range stmts {
		if _, err := env.receiver.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("receiver schema: %w", err)
		}
	}
	return nil
}

// startServer starts a private server in a new temporary directory, after
// removing the directories of earlier binaries that died without cleaning
// up.
func (h *harness) startServer(ctx context.Context) error {
	removeAbandonedDirs()
	dir, err := os.MkdirTemp("", tempDirPrefix)
	if err != nil {
		return err
	}
	h.dir = dir
	if h.dirLock, err = lockDir(dir); err != nil {
		return err
	}
	h.server, err = mysqld.Start(ctx, mysqld.Options{DataDir: filepath.Join(dir, "data"), Durable: false})
	if err != nil {
		return fmt.Errorf("start a database server (or set %s): %w", envDSN, err)
	}
	h.base, err = mysql.ParseDSN(h.server.DSN(""))
	return err
}

// dsn returns the DSN of database name on the server.
func (h *harness) dsn(name string) string {
	cfg := h.base.Clone()
	cfg.DBName = name
	return cfg.FormatDSN()
}

// close drops the databases, stops the server and removes its files. It is
// safe on a harness that was set up only in part.
func (h *harness) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	var errs []error
	for _, pool := range []*sql.DB{env.platform, env.receiver} {
		if pool != nil {
			pool.Close()
		}
	}
	env.platform, env.receiver = nil, nil
	if h.admin != nil {
		for _, name := range h.databases {
			if _, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
				errs = append(errs, fmt.Errorf("drop %s: %w", name, err))
			}
		}
		if h.runLock != nil {
			h.runLock.Close() // the server releases the lock with the connection
		}
		h.admin.Close()
	}
	if h.server != nil {
		if err := h.server.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if h.dir != "" {
		if err := os.RemoveAll(h.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if h.dirLock != nil {
		h.dirLock.Close()
	}
	return errors.Join(errs...)
}

// openReceiver opens the receiver's database the way the example's
// receiver does: the plain driver, times in UTC, none of the platform's
// session settings (isolation included), so that the Inbox is tested on
// what it sets itself.
func openReceiver(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// schemaStatements splits a schema file statement by statement: a statement
// ends with a line whose last character is ';'; lines starting with -- are
// comments.
func schemaStatements(text string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// lockDir locks dir's owner file for this process; the kernel releases the
// lock when the process exits, however it exits.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ownerLockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// removeAbandonedDirs removes the server directories of test binaries of
// this package that are no longer running (their servers died with them).
// A directory younger than a minute may not be locked yet and is kept.
func removeAbandonedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := lockDir(dir)
		if err != nil {
			continue
		}
		os.RemoveAll(dir)
		f.Close()
	}
}
