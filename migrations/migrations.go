// Package migrations embeds the platform schema files. Files are named
// NNNNNN_<module>_<what>.sql and applied in one global order by internal/migrate.
package migrations

import "embed"

// Files holds every platform migration, in the directory root.
//
//go:embed *.sql
var Files embed.FS
