package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

// A test binary that crashes, or whose package has no TestMain calling Main,
// leaves its server directory or, on a shared server, its databases behind.
// Each test binary marks what it owns as in use while it runs, and removes
// what earlier binaries abandoned when it starts; on a Galera node, where
// GET_LOCK is node-local, it does neither (see setup).

// tempDirPrefix starts the name of every server directory testdb creates.
const tempDirPrefix = "orbit-testdb-"

// lockFileName is the file in a server directory that its owner keeps
// locked (flock) while it runs; the kernel drops the lock when the owner
// exits, however it exits.
const lockFileName = "owner.lock"

// minAbandonedAge protects a directory that was just created and is not
// locked yet.
const minAbandonedAge = time.Minute

// lockDir locks dir for this process and returns the open lock file, which
// must stay open while the directory is in use.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// removeAbandonedDirs removes the server directories of test binaries that
// are no longer running. Their servers died with them.
func removeAbandonedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < minAbandonedAge {
			continue
		}
		f, err := lockDir(dir)
		if err != nil {
			continue // in use, or not ours to judge
		}
		os.RemoveAll(dir)
		f.Close()
	}
}

// runLockName is the server-wide lock a test binary holds while it uses a
// shared server (GET_LOCK names are at most 64 characters).
func runLockName(runID string) string {
	return "orbit_testdb_" + runID
}

// wsrepOn reports whether the server is a Galera node that replicates
// (wsrep_on), where GET_LOCK is node-local. MySQL has no such variable.
func wsrepOn(ctx context.Context, admin *sql.DB) bool {
	var on sql.NullInt64
	err := admin.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on)
	return err == nil && on.Int64 == 1
}

// claimRun takes the run lock on a connection kept open until teardown.
func (h *harness) claimRun(ctx context.Context) error {
	conn, err := h.admin.Conn(ctx)
	if err != nil {
		return fmt.Errorf("testdb: %w", err)
	}
	var got int
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", runLockName(h.runID)).Scan(&got); err != nil || got != 1 {
		conn.Close()
		return fmt.Errorf("testdb: take run lock: %v (got %d)", err, got)
	}
	h.runLock = conn
	return nil
}

// ownedDatabase matches the names of the databases testdb creates and
// captures the run ID.
var ownedDatabase = regexp.MustCompile(`^(?:orbit_tpl|t)_([0-9a-f]{12})(?:_[0-9]+)?$`)

// dropAbandoned drops, on a shared server, the databases of test binaries
// whose run lock is free: they are no longer running. Failures are ignored;
// the next run tries again.
func (h *harness) dropAbandoned(ctx context.Context) {
	rows, err := h.admin.QueryContext(ctx, `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
		WHERE SCHEMA_NAME LIKE 'orbit\_tpl\_%' OR SCHEMA_NAME LIKE 't\_%'`)
	if err != nil {
		return
	}
	var names []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) == nil && ownedDatabase.MatchString(name) {
			names = append(names, name)
		}
	}
	rows.Close()
	for _, name := range names {
		runID := ownedDatabase.FindStringSubmatch(name)[1]
		var free int
		err := h.admin.QueryRowContext(ctx, "SELECT IS_FREE_LOCK(?)", runLockName(runID)).Scan(&free)
		if err != nil || free != 1 {
			continue
		}
		h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	}
}
