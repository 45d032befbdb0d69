// Package migrate applies Orbit's schema migrations to a MySQL database.
//
// Migrations are .sql files applied forward only, in version order, each
// recorded in schema_migrations with its SHA-256. Each module owns a folder of
// them, and the platform-wide files that belong to no module have one; a Set
// names every folder, and versions are global across them. MySQL commits DDL
// implicitly, so a file is not atomic: it is recorded as 'applying' before
// its first statement and as 'applied' after its last. A file that changed
// after it was applied, an applied version the binary does not know, or a
// file left 'applying' stops Up and Check with an error that says what to do.
//
// The pool must scan DATETIME as time.Time (parseTime=true), as pools made by
// internal/db.Open do.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// States of a migration file, as Status reports them.
const (
	StateApplied  = "applied"  // applied and unchanged since
	StatePending  = "pending"  // not applied yet
	StateChanged  = "changed"  // applied, but the file differs from what was applied
	StateUnknown  = "unknown"  // applied, but this binary has no such file
	StateApplying = "applying" // started and never finished: half-applied
)

// Errors Up and Check wrap; the full message names the file and what to do.
var (
	// ErrBehind means files are pending and nothing is wrong otherwise:
	// running Up brings the database up to date.
	ErrBehind = errors.New("migrate: database schema is behind")

	// ErrChanged means an applied file has changed since.
	ErrChanged = errors.New("migrate: migration changed after it was applied")

	// ErrUnknown means the database has a migration the binary lacks,
	// usually because a newer orbit migrated it.
	ErrUnknown = errors.New("migrate: unknown migration")

	// ErrHalfApplied means a file was started and never finished.
	ErrHalfApplied = errors.New("migrate: migration half-applied")
)

// FileStatus is the state of one migration, as Status reports it.
type FileStatus struct {
	Version   int
	Name      string     // the recorded file name; for StateUnknown, the name recorded in the database
	Module    string     // the owning module; empty for a platform-wide file and for StateUnknown
	State     string     // one of the State constants
	AppliedAt *time.Time // UTC; nil unless applied
}

// createTable creates the table that records applied migrations.
const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version    INT          NOT NULL COMMENT 'migration version, from the file name',
  name       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'migration file name',
  sha256     CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 of the file, lowercase hex',
  state      ENUM('applying','applied') NOT NULL COMMENT 'applying while its statements run, applied once all succeeded',
  started_at DATETIME(6)  NOT NULL COMMENT 'when applying began, UTC',
  applied_at DATETIME(6)  NULL COMMENT 'when the last statement succeeded, UTC; NULL while applying',
  PRIMARY KEY (version)
) ENGINE=InnoDB COMMENT='platform migrations applied to this database'`

// Up applies every pending migration of set to the database of pool, in
// version order, and returns the names of the files it applied (none when
// the database is up to date). It first checks every applied migration
// against set and stops on a changed, unknown or half-applied one.
//
// Up holds a lease in the table schema_migrations_lock while it works, so
// Ups from several nodes on one database, or on several nodes of a Galera
// cluster, run one after the other; it waits up to 60 seconds for the
// lease. The lease lasts 20 seconds and is renewed every 5 while Up runs; if
// the process dies, the next Up takes it over once it has expired.
//
// A file whose first statement fails is unrecorded again, since nothing of it
// ran. A file that fails later is left half-applied for a human to repair.
func Up(ctx context.Context, pool *sql.DB, set Set) (applied []string, err error) {
	files, err := Load(set)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if err := needDatabase(ctx, conn); err != nil {
		return nil, err
	}
	l, err := acquireLease(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer l.release(ctx)

	if _, err := conn.ExecContext(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	rows, err := readRows(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := verify(files, set.Renamed, rows); err != nil {
		return nil, err
	}
	done := make(map[int]bool, len(rows))
	for _, r := range rows {
		done[r.version] = true
	}
	for _, f := range files {
		if done[f.Version] {
			continue
		}
		if err := l.check(); err != nil {
			return applied, err
		}
		if err := apply(ctx, conn, f); err != nil {
			return applied, err
		}
		applied = append(applied, f.Name)
	}
	return applied, nil
}

// Status returns the state of every migration file of set and of every
// migration recorded in the database that set lacks, in version order. It
// changes nothing; a database without schema_migrations has every file
// pending.
func Status(ctx context.Context, pool *sql.DB, set Set) ([]FileStatus, error) {
	files, err := Load(set)
	if err != nil {
		return nil, err
	}
	rows, err := readRows(ctx, pool)
	if err != nil {
		return nil, err
	}
	byVersion := make(map[int]row, len(rows))
	for _, r := range rows {
		byVersion[r.version] = r
	}
	var out []FileStatus
	for _, f := range files {
		r, ok := byVersion[f.Version]
		delete(byVersion, f.Version)
		st := FileStatus{Version: f.Version, Name: f.Name, Module: f.Module, State: StatePending}
		if ok {
			st.AppliedAt = r.appliedAt()
			switch {
			case r.state == StateApplying:
				st.State = StateApplying
			case r.sha256 != f.SHA256 || !sameName(r.name, f.Name, set.Renamed):
				st.State = StateChanged
			default:
				st.State = StateApplied
			}
		}
		out = append(out, st)
	}
	for _, r := range byVersion {
		out = append(out, FileStatus{Version: r.version, Name: r.name, State: StateUnknown, AppliedAt: r.appliedAt()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Check returns nil when every file of set is applied and unchanged. When
// files are only pending it returns an error wrapping ErrBehind that lists
// them; a changed, unknown or half-applied migration gives the same error Up
// would, except that a file another process is applying right now counts as
// pending. It changes nothing. orbit serve calls it to refuse a schema that
// is behind.
func Check(ctx context.Context, pool *sql.DB, set Set) error {
	files, err := Load(set)
	if err != nil {
		return err
	}
	rows, err := readRows(ctx, pool)
	if err != nil {
		return err
	}
	if err := verify(files, set.Renamed, rows); err != nil {
		if errors.Is(err, ErrHalfApplied) && migrating(ctx, pool) {
			return fmt.Errorf("%w: another process is applying migrations right now", ErrBehind)
		}
		return err
	}
	done := make(map[int]bool, len(rows))
	for _, r := range rows {
		done[r.version] = true
	}
	var pending []string
	for _, f := range files {
		if !done[f.Version] {
			pending = append(pending, f.Name)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: pending %s; run orbit migrate up", ErrBehind, strings.Join(pending, ", "))
	}
	return nil
}

// row is one row of schema_migrations.
type row struct {
	version   int
	name      string
	sha256    string
	state     string
	startedAt time.Time
	applied   sql.NullTime
}

func (r row) appliedAt() *time.Time {
	if !r.applied.Valid {
		return nil
	}
	t := r.applied.Time.UTC()
	return &t
}

// querier is what readRows needs of a *sql.DB or *sql.Conn.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readRows returns the rows of schema_migrations in version order, or none
// when the table does not exist.
func readRows(ctx context.Context, q querier) ([]row, error) {
	rs, err := q.QueryContext(ctx, `SELECT version, name, sha256, state, started_at, applied_at
		FROM schema_migrations ORDER BY version`)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // ER_NO_SUCH_TABLE
			return nil, nil
		}
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	defer rs.Close()
	var rows []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.version, &r.name, &r.sha256, &r.state, &r.startedAt, &r.applied); err != nil {
			return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	return rows, nil
}

// verify checks the recorded migrations against files, in version order,
// and returns the first problem. A row recorded under a name that renamed
// maps to the file's name is the same file.
func verify(files []File, renamed map[string]string, rows []row) error {
	byVersion := make(map[int]File, len(files))
	for _, f := range files {
		byVersion[f.Version] = f
	}
	for _, r := range rows {
		f, ok := byVersion[r.version]
		switch {
		case !ok:
			return fmt.Errorf("%w: database has migration %d (%s) that this binary does not know; upgrade orbit",
				ErrUnknown, r.version, r.name)
		case r.state == StateApplying:
			return fmt.Errorf("%w: %s was started at %s UTC and never finished, so the schema may hold part of it; "+
				"repair the schema by hand, then delete its row from schema_migrations to run it again, "+
				"or set its state to 'applied' if it is complete",
				ErrHalfApplied, r.name, r.startedAt.UTC().Format("2006-01-02 15:04:05"))
		case !sameName(r.name, f.Name, renamed):
			return fmt.Errorf("%w: migration %d was applied as %s but the file is now %s", ErrChanged, r.version, r.name, f.Name)
		case r.sha256 != f.SHA256:
			return fmt.Errorf("%w: %s: database has sha256 %s, file has sha256 %s; restore the applied file and put the change in a new migration",
				ErrChanged, f.Name, r.sha256, f.SHA256)
		}
	}
	return nil
}

// sameName reports whether recorded, a name in schema_migrations, names the
// file now called name: the same name, or a former one renamed maps to it.
func sameName(recorded, name string, renamed map[string]string) bool {
	return recorded == name || renamed[recorded] == name
}

// apply runs one file on conn and records it.
func apply(ctx context.Context, conn *sql.Conn, f File) error {
	if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, sha256, state, started_at)
		VALUES (?, ?, ?, 'applying', UTC_TIMESTAMP(6))`, f.Version, f.Name, f.SHA256); err != nil {
		return fmt.Errorf("migrate: %s: record start: %w", f.Name, err)
	}
	for i, stmt := range f.statements {
		_, err := conn.ExecContext(ctx, stmt)
		if err == nil {
			continue
		}
		// A statement the server refused changed nothing; if it was the
		// first one, nothing of the file ran and it may simply be retried.
		var me *mysql.MySQLError
		if i == 0 && errors.As(err, &me) {
			if _, delErr := conn.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = ? AND state = 'applying'`, f.Version); delErr == nil {
				return fmt.Errorf("migrate: %s: statement 1 of %d failed and nothing was applied; fix the file and run again: %w",
					f.Name, len(f.statements), err)
			}
		}
		return fmt.Errorf("migrate: %s: statement %d of %d failed; the file is half-applied and must be repaired by hand: %w\n%s",
			f.Name, i+1, len(f.statements), err, stmt)
	}
	if _, err := conn.ExecContext(ctx, `UPDATE schema_migrations SET state = 'applied', applied_at = UTC_TIMESTAMP(6)
		WHERE version = ?`, f.Version); err != nil {
		return fmt.Errorf("migrate: %s: record end: %w", f.Name, err)
	}
	return nil
}

// needDatabase returns an error when the connection has no database.
func needDatabase(ctx context.Context, conn *sql.Conn) error {
	var database sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !database.Valid || database.String == "" {
		return errors.New("migrate: the DSN names no database")
	}
	return nil
}
