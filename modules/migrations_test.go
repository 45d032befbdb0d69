package modules

import (
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/migrations"
)

// schemaModule is a module that owns tables: its files are under
// migrations/, as //go:embed migrations/*.sql leaves them.
type schemaModule struct {
	id    string
	files fstest.MapFS
}

func (m *schemaModule) OrbitModule() Info {
	return Info{ID: m.id, New: func() Module { return &schemaModule{id: m.id, files: m.files} }}
}

func (m *schemaModule) Migrations() fs.FS { return m.files }

// plainModule owns no tables.
type plainModule struct{}

func (plainModule) OrbitModule() Info {
	return Info{ID: "plain", New: func() Module { return plainModule{} }}
}

// sqlFiles returns an FS holding the named files under migrations/.
func sqlFiles(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		fsys["migrations/"+n] = &fstest.MapFile{Data: []byte("SELECT 1;")}
	}
	return fsys
}

// TestMigrations_CollectsEveryMigratorInGlobalOrder: the files of every
// module that owns tables join the platform-wide ones, each under its
// module, in one order by version; a module without tables adds nothing.
// Nothing is configured or provisioned: the files are static data.
func TestMigrations_CollectsEveryMigratorInGlobalOrder(t *testing.T) {
	t.Parallel()
	infos := []Info{
		(&schemaModule{id: "alpha", files: sqlFiles("000001_one.sql", "000003_three.sql")}).OrbitModule(),
		plainModule{}.OrbitModule(),
		(&schemaModule{id: "beta-two", files: sqlFiles("000002_two.sql", "000004_four.sql")}).OrbitModule(),
	}
	set := collectMigrations(infos)
	if len(set.Sources) != 3 || set.Sources[0].Module != "" || set.Sources[0].FS != fs.FS(migrations.Files) {
		t.Fatalf("sources = %+v, want the platform folder and two modules", set.Sources)
	}
	if !maps.Equal(set.Renamed, migrations.Renamed()) {
		t.Errorf("renamed = %v, want migrations.Renamed()", set.Renamed)
	}
	// The platform's renamed files are not among these fakes.
	set.Renamed = nil
	files, err := migrate.Load(set)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Module+":"+f.Name)
	}
	want := []string{
		"alpha:000001_alpha_one.sql", "beta-two:000002_beta-two_two.sql",
		"alpha:000003_alpha_three.sql", "beta-two:000004_beta-two_four.sql",
	}
	if !slices.Equal(got, want) {
		t.Errorf("files =\n%q\nwant\n%q", got, want)
	}
}

// TestMigrations_DuplicateNumberAcrossModulesIsRefused: two modules that
// take one number are a programmer error, reported at load.
func TestMigrations_DuplicateNumberAcrossModulesIsRefused(t *testing.T) {
	t.Parallel()
	set := collectMigrations([]Info{
		(&schemaModule{id: "alpha", files: sqlFiles("000001_one.sql", "000002_two.sql")}).OrbitModule(),
		(&schemaModule{id: "beta", files: sqlFiles("000002_also_two.sql")}).OrbitModule(),
	})
	if _, err := migrate.Load(set); err == nil || !strings.Contains(err.Error(), "same version") {
		t.Errorf("Load = %v, want a duplicate version", err)
	}
}

// TestMigrations_GapIsRefused: a number no module took is a gap.
func TestMigrations_GapIsRefused(t *testing.T) {
	t.Parallel()
	set := collectMigrations([]Info{
		(&schemaModule{id: "alpha", files: sqlFiles("000001_one.sql", "000003_three.sql")}).OrbitModule(),
	})
	if _, err := migrate.Load(set); err == nil || !strings.Contains(err.Error(), "expected version 000002") {
		t.Errorf("Load = %v, want a gap at 000002", err)
	}
}

// TestMigrations_ModuleWithoutFolderIsRefused: a Migrator whose FS has no
// migrations directory is named in the error.
func TestMigrations_ModuleWithoutFolderIsRefused(t *testing.T) {
	t.Parallel()
	set := collectMigrations([]Info{
		(&schemaModule{id: "alpha", files: fstest.MapFS{"000001_one.sql": {Data: []byte("SELECT 1;")}}}).OrbitModule(),
	})
	if _, err := migrate.Load(set); err == nil || !strings.Contains(err.Error(), "alpha") {
		t.Errorf("Load = %v, want an error naming alpha", err)
	}
}
