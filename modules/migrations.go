package modules

import (
	"io/fs"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/migrations"
)

// Migrations returns the schema migrations of the binary: the platform-wide
// files of the top-level migrations folder and the files of every registered
// module that is a Migrator, which internal/migrate merges into one global
// version order. It needs no configuration and touches nothing: it asks a
// fresh instance of each registered module for its static files. A test
// binary gets every module's files only when it links them all, e.g. with a
// blank import of modules/all.
func Migrations() migrate.Set {
	return collectMigrations(Registered())
}

// collectMigrations returns the migration set of the modules of infos and
// the platform-wide files.
func collectMigrations(infos []Info) migrate.Set {
	set := migrate.Set{
		Sources: []migrate.Source{{FS: migrations.Files}},
		Renamed: migrations.Renamed(),
	}
	for _, info := range infos {
		m, ok := info.New().(Migrator)
		if !ok {
			continue
		}
		// A constant, valid directory name: Sub cannot fail. A module
		// without the directory fails in migrate.Load, naming the module.
		files, _ := fs.Sub(m.Migrations(), "migrations")
		set.Sources = append(set.Sources, migrate.Source{Module: info.ID, FS: files})
	}
	return set
}
