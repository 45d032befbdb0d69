package migrate_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
	_ "github.com/orbitrun/orbit/modules/all"
)

const (
	fileA = "000001_alpha_things.sql"
	fileB = "000002_beta_more_things.sql"
	fileC = "000003_alpha-two_extra.sql"

	sqlA = `-- Things; the first table.
CREATE TABLE things (
  id   INT NOT NULL COMMENT 'id; the key',
  name VARCHAR(32) NOT NULL COMMENT 'name',
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='things';

INSERT INTO things VALUES (1, 'one');
`
	sqlB = `CREATE TABLE more_things (id INT NOT NULL PRIMARY KEY COMMENT 'id') COMMENT='more';
ALTER TABLE things ADD COLUMN size INT NOT NULL DEFAULT 0 COMMENT 'size';
`
	sqlC = `CREATE TABLE extra (id INT NOT NULL PRIMARY KEY COMMENT 'id') COMMENT='extra';`
)

// files returns the given files of fileA, fileB and fileC, unchanged, keyed
// by the name they are recorded under; set puts each in its module's folder.
func files(names ...string) fstest.MapFS {
	all := map[string]string{fileA: sqlA, fileB: sqlB, fileC: sqlC}
	fsys := fstest.MapFS{}
	for _, name := range names {
		fsys[name] = &fstest.MapFile{Data: []byte(all[name])}
	}
	return fsys
}

// recorded splits a recorded name, NNNNNN_<module>_<what>.sql, into the
// module and the name of the file in the module's folder.
var recorded = regexp.MustCompile(`^(\d{6})_([a-z][a-z0-9-]*)_(.+)$`)

// set returns a migration set with the files of byName, keyed by recorded
// name, each as NNNNNN_<what>.sql in the folder of its module.
func set(byName fstest.MapFS) migrate.Set {
	folders := map[string]fstest.MapFS{}
	for name, f := range byName {
		m := recorded.FindStringSubmatch(name)
		if folders[m[2]] == nil {
			folders[m[2]] = fstest.MapFS{}
		}
		folders[m[2]][m[1]+"_"+m[3]] = f
	}
	var s migrate.Set
	for _, module := range slices.Sorted(maps.Keys(folders)) {
		s.Sources = append(s.Sources, migrate.Source{Module: module, FS: folders[module]})
	}
	return s
}

// folder returns a folder holding the named files, each holding "SELECT 1;".
func folder(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		fsys[n] = &fstest.MapFile{Data: []byte("SELECT 1;")}
	}
	return fsys
}

// setup returns a pool on a fresh, empty database and its DSN.
func setup(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := testdb.NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool, dsn
}

func up(t *testing.T, pool *sql.DB, fsys fstest.MapFS) []string {
	t.Helper()
	applied, err := migrate.Up(context.Background(), pool, set(fsys))
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

func states(t *testing.T, pool *sql.DB, fsys fstest.MapFS) map[string]string {
	t.Helper()
	st, err := migrate.Status(context.Background(), pool, set(fsys))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, s := range st {
		out[s.Name] = s.State
	}
	return out
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestLoad_RealMigrationsAreInSequence(t *testing.T) {
	t.Parallel()
	loaded, err := migrate.Load(modules.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) == 0 {
		t.Fatal("no platform migrations")
	}
	for i, f := range loaded {
		if f.Version != i+1 || len(f.SHA256) != 64 || f.Module == "" {
			t.Errorf("file %d: %+v", i, f)
		}
	}
}

// TestLoad_MergesModulesInGlobalOrder: the files of several modules and the
// platform-wide ones make one order by version, whatever folder each is in.
func TestLoad_MergesModulesInGlobalOrder(t *testing.T) {
	t.Parallel()
	loaded, err := migrate.Load(migrate.Set{Sources: []migrate.Source{
		{Module: "beta", FS: folder("000002_b_one.sql", "000005_b_two.sql")},
		{FS: folder("000004_shared.sql")},
		{Module: "alpha", FS: folder("000001_a_one.sql", "000003_a_two.sql", "000006_a_three.sql")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, f := range loaded {
		if f.Version != i+1 {
			t.Errorf("file %d has version %d", i, f.Version)
		}
		got = append(got, f.Module+":"+f.Name)
	}
	want := []string{
		"alpha:000001_alpha_a_one.sql", "beta:000002_beta_b_one.sql", "alpha:000003_alpha_a_two.sql",
		":000004_shared.sql", "beta:000005_beta_b_two.sql", "alpha:000006_alpha_a_three.sql",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Load =\n%q\nwant\n%q", got, want)
	}
}

// TestLoad_RefusesDuplicateNumberAcrossModules: numbers are global, so two
// modules may not both take one.
func TestLoad_RefusesDuplicateNumberAcrossModules(t *testing.T) {
	t.Parallel()
	_, err := migrate.Load(migrate.Set{Sources: []migrate.Source{
		{Module: "alpha", FS: folder("000001_a_one.sql", "000002_a_two.sql")},
		{Module: "beta", FS: folder("000002_b_one.sql")},
	}})
	if err == nil || !strings.Contains(err.Error(), "same version") ||
		!strings.Contains(err.Error(), "alpha/migrations/000002_a_two.sql") || !strings.Contains(err.Error(), "beta/migrations/000002_b_one.sql") {
		t.Errorf("Load = %v, want a duplicate version naming both files", err)
	}
}

// TestLoad_RefusesGapAcrossModules: a number no module took is a gap, even
// when each module's own files leave gaps for the others'.
func TestLoad_RefusesGapAcrossModules(t *testing.T) {
	t.Parallel()
	_, err := migrate.Load(migrate.Set{Sources: []migrate.Source{
		{Module: "alpha", FS: folder("000001_a_one.sql", "000004_a_two.sql")},
		{Module: "beta", FS: folder("000002_b_one.sql")},
	}})
	if err == nil || !strings.Contains(err.Error(), "expected version 000003") || !strings.Contains(err.Error(), "000004_a_two.sql") {
		t.Errorf("Load = %v, want a gap at 000003", err)
	}
}

func TestLoad_RejectsBadNamesAndSequences(t *testing.T) {
	t.Parallel()
	for name, set := range map[string]migrate.Set{
		"Gap":             {Sources: []migrate.Source{{Module: "a", FS: folder("000001_x.sql", "000003_y.sql")}}},
		"Duplicate":       {Sources: []migrate.Source{{Module: "a", FS: folder("000001_x.sql")}, {Module: "b", FS: folder("000001_y.sql")}}},
		"NotFromOne":      {Sources: []migrate.Source{{Module: "a", FS: folder("000002_x.sql")}}},
		"UpperCase":       {Sources: []migrate.Source{{Module: "a", FS: folder("000001_X.sql")}}},
		"ShortVersion":    {Sources: []migrate.Source{{Module: "a", FS: folder("1_x.sql")}}},
		"NoWhat":          {Sources: []migrate.Source{{Module: "a", FS: folder("000001.sql")}}},
		"BadModuleID":     {Sources: []migrate.Source{{Module: "1admin", FS: folder("000001_x.sql")}}},
		"NoFolder":        {Sources: []migrate.Source{{Module: "a", FS: fstest.MapFS{"x/000001_x.sql": {}}}, {Module: "b", FS: os.DirFS("no-such-dir")}}},
		"RenamedToNoFile": {Sources: []migrate.Source{{Module: "a", FS: folder("000001_x.sql")}}, Renamed: map[string]string{"000001_b_x.sql": "000001_a_y.sql"}},
		"RenamedVersion":  {Sources: []migrate.Source{{Module: "a", FS: folder("000001_x.sql")}}, Renamed: map[string]string{"000002_b_x.sql": "000001_a_x.sql"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := migrate.Load(set); err == nil || !strings.HasPrefix(err.Error(), "migrate: ") {
				t.Errorf("Load = %v, want an error", err)
			}
		})
	}
}

func TestLoad_IgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"000001_things.sql":  {Data: []byte(sqlA)},
		"README.md":          {Data: []byte("notes")},
		"old/000009_y.sql":   {Data: []byte("SELECT 1;")},
		"000009_x_y.sql.bak": {Data: []byte("SELECT 1;")},
	}
	loaded, err := migrate.Load(migrate.Set{Sources: []migrate.Source{{Module: "alpha", FS: fsys}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 1 || loaded[0].Name != fileA || loaded[0].Module != "alpha" || loaded[0].SHA256 != digest(sqlA) {
		t.Errorf("Load = %+v", loaded)
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	got := migrate.SplitStatements("-- head; comment;\n" +
		"CREATE TABLE t (\n  a INT COMMENT 'x; y'\n);\n\n" +
		"  -- indented comment\n" +
		"INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);\r\n" +
		"UPDATE t SET a = 3  ;  \n" +
		"DELETE FROM t")
	want := []string{
		"CREATE TABLE t (\n  a INT COMMENT 'x; y'\n)",
		"INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
		"UPDATE t SET a = 3",
		"DELETE FROM t",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SplitStatements =\n%q\nwant\n%q", got, want)
	}
}

func TestUp_AppliesFreshDatabase(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	fsys := files(fileA, fileB)
	if got := up(t, pool, fsys); !slices.Equal(got, []string{fileA, fileB}) {
		t.Errorf("Up applied %v", got)
	}
	var n, size int
	if err := pool.QueryRow("SELECT COUNT(*), MAX(size) FROM things").Scan(&n, &size); err != nil || n != 1 || size != 0 {
		t.Errorf("things: %d rows, size %d, %v", n, size, err)
	}
	rows, err := pool.Query("SELECT version, name, sha256, state, applied_at FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var version int
		var name, sum, state string
		var at sql.NullTime
		if err := rows.Scan(&version, &name, &sum, &state, &at); err != nil {
			t.Fatal(err)
		}
		if state != "applied" || !at.Valid || sum != digest(string(fsys[name].Data)) {
			t.Errorf("row %d %s: state %s, applied_at %v, sha256 %s", version, name, state, at, sum)
		}
		got = append(got, name)
	}
	if !slices.Equal(got, []string{fileA, fileB}) {
		t.Errorf("schema_migrations has %v", got)
	}
}

func TestUp_AgainIsNoOp(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	fsys := files(fileA, fileB)
	up(t, pool, fsys)
	if got := up(t, pool, fsys); len(got) != 0 {
		t.Errorf("second Up applied %v", got)
	}
}

func TestUp_AppliesOnlyNewFiles(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	up(t, pool, files(fileA))
	if got := up(t, pool, files(fileA, fileB, fileC)); !slices.Equal(got, []string{fileB, fileC}) {
		t.Errorf("Up applied %v, want %s and %s", got, fileB, fileC)
	}
}

// TestUp_ConcurrentCallsApplyEachFileOnce runs Up from several pools at once,
// as several nodes starting together would.
func TestUp_ConcurrentCallsApplyEachFileOnce(t *testing.T) {
	t.Parallel()
	_, dsn := setup(t)
	fsys := files(fileA, fileB, fileC)
	const nodes = 4
	var wg sync.WaitGroup
	results := make([][]string, nodes)
	errs := make([]error, nodes)
	start := make(chan struct{})
	for i := range nodes {
		ctx := context.Background()
		pool, err := db.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		wg.Go(func() {
			<-start
			results[i], errs[i] = migrate.Up(ctx, pool, set(fsys))
		})
	}
	close(start)
	wg.Wait()
	var all []string
	for i := range nodes {
		if errs[i] != nil {
			t.Errorf("node %d: %v", i, errs[i])
		}
		all = append(all, results[i]...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []string{fileA, fileB, fileC}) {
		t.Errorf("files applied across nodes: %v, want each once", all)
	}
}

func TestUp_RefusesChangedFile(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	up(t, pool, files(fileA, fileB))
	tampered := files(fileA, fileB)
	tampered[fileA] = &fstest.MapFile{Data: []byte(strings.Replace(sqlA, "'one'", "'uno'", 1))}

	_, err := migrate.Up(context.Background(), pool, set(tampered))
	if !errors.Is(err, migrate.ErrChanged) {
		t.Fatalf("Up = %v, want ErrChanged", err)
	}
	for _, want := range []string{fileA, digest(sqlA), digest(string(tampered[fileA].Data))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := migrate.Check(context.Background(), pool, set(tampered)); !errors.Is(err, migrate.ErrChanged) {
		t.Errorf("Check = %v, want ErrChanged", err)
	}
	if got := states(t, pool, tampered); got[fileA] != migrate.StateChanged || got[fileB] != migrate.StateApplied {
		t.Errorf("Status = %v", got)
	}
}

func TestUp_RefusesUnknownAppliedVersion(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	up(t, pool, files(fileA, fileB))
	older := files(fileA)

	_, err := migrate.Up(context.Background(), pool, set(older))
	if !errors.Is(err, migrate.ErrUnknown) || !strings.Contains(err.Error(), "database has migration 2 ") ||
		!strings.Contains(err.Error(), "upgrade orbit") {
		t.Fatalf("Up = %v, want ErrUnknown naming migration 2", err)
	}
	if err := migrate.Check(context.Background(), pool, set(older)); !errors.Is(err, migrate.ErrUnknown) {
		t.Errorf("Check = %v, want ErrUnknown", err)
	}
	if got := states(t, pool, older); got[fileA] != migrate.StateApplied || got[fileB] != migrate.StateUnknown {
		t.Errorf("Status = %v", got)
	}
}

func TestUp_RefusesHalfAppliedFile(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	broken := files(fileA)
	broken[fileB] = &fstest.MapFile{Data: []byte("CREATE TABLE more_things (id INT PRIMARY KEY);\nALTER TABLE nowhere ADD COLUMN x INT;\n")}

	_, err := migrate.Up(context.Background(), pool, set(broken))
	if err == nil || !strings.Contains(err.Error(), "statement 2 of 2") || !strings.Contains(err.Error(), "half-applied") {
		t.Fatalf("Up = %v, want statement 2 to fail", err)
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		t.Errorf("error %v does not wrap the server's error", err)
	}

	for name, fsys := range map[string]fstest.MapFS{"SameFile": broken, "FixedFile": files(fileA, fileB)} {
		_, err := migrate.Up(context.Background(), pool, set(fsys))
		if !errors.Is(err, migrate.ErrHalfApplied) || !strings.Contains(err.Error(), fileB) ||
			!strings.Contains(err.Error(), "by hand") {
			t.Errorf("%s: Up = %v, want ErrHalfApplied naming %s", name, err, fileB)
		}
	}
	if err := migrate.Check(context.Background(), pool, set(broken)); !errors.Is(err, migrate.ErrHalfApplied) {
		t.Errorf("Check = %v, want ErrHalfApplied", err)
	}
	if got := states(t, pool, broken); got[fileA] != migrate.StateApplied || got[fileB] != migrate.StateApplying {
		t.Errorf("Status = %v", got)
	}
}

// TestUp_FailedFirstStatementCanBeRetried: a file whose first statement the
// server refuses changed nothing, so it is not left half-applied.
func TestUp_FailedFirstStatementCanBeRetried(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	broken := files(fileA)
	broken[fileB] = &fstest.MapFile{Data: []byte("CREATE TABLE more_things (id INT PRIMARY KEY) ENGINE=NoSuchEngine;\n")}
	_, err := migrate.Up(context.Background(), pool, set(broken))
	if err == nil || !strings.Contains(err.Error(), "nothing was applied") {
		t.Fatalf("Up = %v, want statement 1 to fail", err)
	}
	if got := states(t, pool, broken); got[fileB] != migrate.StatePending {
		t.Errorf("Status = %v, want %s pending", got, fileB)
	}
	if got := up(t, pool, files(fileA, fileB)); !slices.Equal(got, []string{fileB}) {
		t.Errorf("Up with the fixed file applied %v", got)
	}
}

func TestCheck_ReportsBehind(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()

	err := migrate.Check(ctx, pool, set(files(fileA, fileB)))
	if !errors.Is(err, migrate.ErrBehind) || !strings.Contains(err.Error(), fileA) || !strings.Contains(err.Error(), fileB) {
		t.Errorf("Check on an empty database = %v, want ErrBehind listing both files", err)
	}
	up(t, pool, files(fileA))
	err = migrate.Check(ctx, pool, set(files(fileA, fileB)))
	if !errors.Is(err, migrate.ErrBehind) || strings.Contains(err.Error(), fileA) || !strings.Contains(err.Error(), fileB) {
		t.Errorf("Check with one file pending = %v, want ErrBehind listing %s only", err, fileB)
	}
	up(t, pool, files(fileA, fileB))
	if err := migrate.Check(ctx, pool, set(files(fileA, fileB))); err != nil {
		t.Errorf("Check when up to date = %v", err)
	}
}

// TestCheck_MigrationInProgressIsBehind: while another node's Up holds the
// migration lease, a file in state 'applying' is being applied, not
// half-applied.
func TestCheck_MigrationInProgressIsBehind(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	up(t, pool, files(fileA))
	if _, err := pool.Exec(`INSERT INTO schema_migrations (version, name, sha256, state, started_at)
		VALUES (2, ?, ?, 'applying', UTC_TIMESTAMP(6))`, fileB, digest(sqlB)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(`INSERT INTO schema_migrations_lock (id, owner, expires_at)
		VALUES (1, 'another node', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)`); err != nil {
		t.Fatal(err)
	}

	if err := migrate.Check(ctx, pool, set(files(fileA, fileB))); !errors.Is(err, migrate.ErrBehind) {
		t.Errorf("Check during a migration = %v, want ErrBehind", err)
	}
	if _, err := pool.Exec("DELETE FROM schema_migrations_lock"); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Check(ctx, pool, set(files(fileA, fileB))); !errors.Is(err, migrate.ErrHalfApplied) {
		t.Errorf("Check after the migration ended = %v, want ErrHalfApplied", err)
	}
}

// TestN7_MigrationLeaseReleased: Up takes the lease in a table, not with
// GET_LOCK, and deletes it when it is done.
func TestN7_MigrationLeaseReleased(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	up(t, pool, files(fileA))
	var n int
	if err := pool.QueryRow("SELECT COUNT(*) FROM schema_migrations_lock").Scan(&n); err != nil || n != 0 {
		t.Errorf("leases left after Up: %d, %v", n, err)
	}
}

// TestN7_ExpiredMigrationLeaseIsTakenOver: the lease of an Up that died is
// taken over once it has expired; an unexpired one is waited for.
func TestN7_ExpiredMigrationLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	up(t, pool, files(fileA))
	if _, err := pool.Exec(`INSERT INTO schema_migrations_lock (id, owner, expires_at)
		VALUES (1, 'dead node', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if got := up(t, pool, files(fileA, fileB)); !slices.Equal(got, []string{fileB}) {
		t.Errorf("Up over an expired lease applied %v", got)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("Up over an expired lease took %s", waited)
	}

	if _, err := pool.Exec(`INSERT INTO schema_migrations_lock (id, owner, expires_at)
		VALUES (1, 'live node', UTC_TIMESTAMP(6) + INTERVAL 1 SECOND)`); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if got := up(t, pool, files(fileA, fileB, fileC)); !slices.Equal(got, []string{fileC}) {
		t.Errorf("Up after a live lease applied %v", got)
	}
	if waited := time.Since(began); waited < 500*time.Millisecond {
		t.Errorf("Up did not wait for a live lease: %s", waited)
	}
}

func TestStatus_FreshThenApplied(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	fsys := files(fileA, fileB)
	st, err := migrate.Status(context.Background(), pool, set(fsys))
	if err != nil {
		t.Fatal(err)
	}
	want := []migrate.FileStatus{
		{Version: 1, Name: fileA, Module: "alpha", State: migrate.StatePending},
		{Version: 2, Name: fileB, Module: "beta", State: migrate.StatePending},
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("Status on an empty database = %+v", st)
	}

	before := db.Now().Add(-time.Second)
	up(t, pool, fsys)
	st, err = migrate.Status(context.Background(), pool, set(fsys))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != migrate.StateApplied || s.AppliedAt == nil || s.AppliedAt.Location() != time.UTC ||
			s.AppliedAt.Before(before) || s.AppliedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("Status after Up: %+v (applied at %v)", s, s.AppliedAt)
		}
	}
}

func TestUp_NeedsADatabase(t *testing.T) {
	t.Parallel()
	_, dsn := setup(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	pool, err := db.Open(context.Background(), cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(context.Background(), pool, set(files(fileA))); err == nil || !strings.Contains(err.Error(), "no database") {
		t.Errorf("Up without a database = %v", err)
	}
}

// TestPlatformMigrations_ApplyCleanly applies the embedded migrations to an
// empty database and checks the storage rules: no foreign keys, InnoDB
// tables, and a comment on every column.
func TestPlatformMigrations_ApplyCleanly(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	loaded, err := migrate.Load(modules.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	applied, err := migrate.Up(ctx, pool, modules.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(loaded) {
		t.Errorf("applied %d of %d files", len(applied), len(loaded))
	}
	if err := migrate.Check(ctx, pool, modules.Migrations()); err != nil {
		t.Errorf("Check after Up: %v", err)
	}

	for what, q := range map[string]string{
		"foreign keys": `SELECT CONCAT(TABLE_NAME, '.', CONSTRAINT_NAME) FROM information_schema.REFERENTIAL_CONSTRAINTS
			WHERE CONSTRAINT_SCHEMA = DATABASE()`,
		"tables not InnoDB": `SELECT TABLE_NAME FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = DATABASE() AND ENGINE <> 'InnoDB'`,
		"columns without a comment": `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_COMMENT = ''`,
	} {
		rows, err := pool.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			found = append(found, s)
		}
		rows.Close()
		if len(found) > 0 {
			t.Errorf("%s: %v", what, found)
		}
	}
}
