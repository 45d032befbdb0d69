package modules_test

import (
	"testing"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/modules"
	_ "github.com/orbitrun/orbit/modules/all"
)

// TestMigrations_TablesBelongToTheModuleWhoseStoreUsesThem: the files that
// were named after the workers and events modules, which own no tables,
// belong to the modules whose stores use their tables.
func TestMigrations_TablesBelongToTheModuleWhoseStoreUsesThem(t *testing.T) {
	t.Parallel()
	files, err := migrate.Load(modules.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int]string{}
	for _, f := range files {
		owner[f.Version] = f.Module
		if f.Module == "workers" || f.Module == "events" {
			t.Errorf("%s belongs to %s, which owns no tables", f.Name, f.Module)
		}
	}
	for version, want := range map[int]string{1: "admin", 4: "tasks", 6: "subscriptions"} {
		if owner[version] != want {
			t.Errorf("migration %d belongs to %q, want %q", version, owner[version], want)
		}
	}
}
