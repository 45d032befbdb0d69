package admin

import (
	"embed"
	"io/fs"

	"github.com/orbitrun/orbit/modules"
)

// migrationFiles holds the schema of the tables the admin module owns
// (namespaces, applications, environments, queues, credentials and their grants, idempotency records, the audit log).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the module's schema files, under migrations/.
func (*Module) Migrations() fs.FS { return migrationFiles }

var _ modules.Migrator = (*Module)(nil)
