package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/migrations"
	"github.com/orbitrun/orbit/modules"
)

// singleFolder holds, byte for byte, the migration files as they were while
// every one lived in the top-level migrations folder, named
// NNNNNN_<module>_<what>.sql. Databases migrated then record these names.
const singleFolder = "testdata/migrations/v1"

// TestMigrate_DatabaseFromTheSingleFolderUpgrades: a database migrated from
// the single folder, as the runner of that time recorded it, is current for
// the files each module owns now: Up applies only the files written since,
// Status reports every file applied, and Check, which orbit serve runs
// before it starts, passes.
func TestMigrate_DatabaseFromTheSingleFolderUpgrades(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()

	// The runner of that time recorded each file under its own name, as a
	// platform-wide folder still is.
	old := migrate.Set{Sources: []migrate.Source{{FS: os.DirFS(singleFolder)}}}
	if _, err := migrate.Up(ctx, pool, old); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(os.DirFS(singleFolder), "*.sql")
	if err != nil || len(names) != 10 {
		t.Fatalf("fixtures: %v, %v", names, err)
	}
	before := recordedRows(t, pool)
	for i, name := range names {
		b, err := os.ReadFile(singleFolder + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if want := (recordedRow{i + 1, name, digest(string(b)), "applied"}); before[i] != want {
			t.Errorf("row %d = %+v, want %+v as the single-folder runner wrote it", i, before[i], want)
		}
	}

	set := modules.Migrations()
	now, err := migrate.Load(set)
	if err != nil {
		t.Fatal(err)
	}
	var since []string
	for _, f := range now[len(names):] {
		since = append(since, f.Name)
	}
	applied, err := migrate.Up(ctx, pool, set)
	if err != nil || !slices.Equal(applied, since) {
		t.Fatalf("Up on the old database applied %v, %v; want only the files written since: %v", applied, err, since)
	}
	if err := migrate.Check(ctx, pool, set); err != nil {
		t.Errorf("Check (orbit serve's schema check) = %v", err)
	}
	st, err := migrate.Status(ctx, pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(now) {
		t.Errorf("Status lists %d migrations, want %d: %+v", len(st), len(now), st)
	}
	for _, s := range st {
		if s.State != migrate.StateApplied || s.Module == "" {
			t.Errorf("Status: %+v, want applied and owned by a module", s)
		}
	}
	// The rows keep the old names, so an orbit of that time still accepts
	// the database during a rolling upgrade.
	if after := recordedRows(t, pool); len(after) != len(now) {
		t.Errorf("schema_migrations: %+v, want %d rows", after, len(now))
	} else {
		for i := range before {
			if after[i] != before[i] {
				t.Errorf("row %d changed from %+v to %+v", i, before[i], after[i])
			}
		}
	}
	// An orbit of that time refuses only because of the files written
	// since, never because of a renamed one.
	_, err = migrate.Up(ctx, pool, old)
	switch {
	case len(since) == 0 && err != nil:
		t.Errorf("Up with the single folder after the upgrade: %v", err)
	case len(since) > 0 && (err == nil || !strings.Contains(err.Error(), since[0])):
		t.Errorf("Up with the single folder after the upgrade = %v, want a refusal naming %s", err, since[0])
	}
}

// TestRenamed_MapsEveryMovedFileOfTheSingleFolder: every file of the single
// folder is a file of the binary with the same version and bytes, recorded
// under the same name or one migrations.Renamed maps to it; and Renamed maps
// nothing else.
func TestRenamed_MapsEveryMovedFileOfTheSingleFolder(t *testing.T) {
	t.Parallel()
	old, err := migrate.Load(migrate.Set{Sources: []migrate.Source{{FS: os.DirFS(singleFolder)}}})
	if err != nil {
		t.Fatal(err)
	}
	now, err := migrate.Load(modules.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	renamed := migrations.Renamed()
	used := 0
	for i, o := range old {
		n := now[i]
		switch {
		case n.Version != o.Version || n.SHA256 != o.SHA256:
			t.Errorf("%s: now %s with sha256 %s, want the same version and bytes", o.Name, n.Name, n.SHA256)
		case n.Name == o.Name:
		case renamed[o.Name] == n.Name:
			used++
		default:
			t.Errorf("%s is now %s, and migrations.Renamed does not map one to the other", o.Name, n.Name)
		}
	}
	if used != len(renamed) {
		t.Errorf("migrations.Renamed has %d entries, %d of them used: %v", len(renamed), used, renamed)
	}
}

// TestUp_AcceptsFileUnderItsFormerName: a file that moved to another module
// is the same file under its former name when Renamed says so, and a changed
// one otherwise.
func TestUp_AcceptsFileUnderItsFormerName(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	up(t, pool, files(fileA, fileB))

	moved := set(files(fileB))
	moved.Sources = append(moved.Sources, migrate.Source{Module: "gamma", FS: fstest.MapFS{"000001_things.sql": {Data: []byte(sqlA)}}})
	if _, err := migrate.Up(ctx, pool, moved); !errors.Is(err, migrate.ErrChanged) {
		t.Fatalf("Up without Renamed = %v, want ErrChanged", err)
	}
	moved.Renamed = map[string]string{fileA: "000001_gamma_things.sql"}
	if applied, err := migrate.Up(ctx, pool, moved); err != nil || len(applied) != 0 {
		t.Fatalf("Up = %v, %v; want nothing applied", applied, err)
	}
	if err := migrate.Check(ctx, pool, moved); err != nil {
		t.Errorf("Check = %v", err)
	}
	st, err := migrate.Status(ctx, pool, moved)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Name != "000001_gamma_things.sql" || st[0].Module != "gamma" || st[0].State != migrate.StateApplied {
		t.Errorf("Status = %+v", st)
	}
}

// recordedRow is one row of schema_migrations, without its times.
type recordedRow struct {
	Version int
	Name    string
	SHA256  string
	State   string
}

// recordedRows returns the rows of schema_migrations in version order.
func recordedRows(t *testing.T, pool *sql.DB) []recordedRow {
	t.Helper()
	rows, err := pool.Query("SELECT version, name, sha256, state FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []recordedRow
	for rows.Next() {
		var r recordedRow
		if err := rows.Scan(&r.Version, &r.Name, &r.SHA256, &r.State); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
