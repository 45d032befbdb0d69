package tasks

import (
	"embed"
	"io/fs"

	"github.com/orbitrun/orbit/modules"
)

// migrationFiles holds the schema of the tables the tasks module owns
// (tasks, task attempts, the result log and worker sessions).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the module's schema files, under migrations/.
func (*Module) Migrations() fs.FS { return migrationFiles }

var _ modules.Migrator = (*Module)(nil)
