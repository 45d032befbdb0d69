package cluster

import (
	"embed"
	"io/fs"

	"github.com/orbitrun/orbit/modules"
)

// migrationFiles holds the schema of the tables the cluster module owns
// (nodes and node_signals) and the node column of the session tables.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the module's schema files, under migrations/.
func (*Module) Migrations() fs.FS { return migrationFiles }

var _ modules.Migrator = (*Module)(nil)
