// Package migrations embeds the platform-wide schema files, those that belong
// to no module, and the bookkeeping of migration names. Each module's own
// files live in modules/<id>/migrations; modules.Migrations merges them with
// these into one global order (see README.md for the numbering rule).
package migrations

import "embed"

// Files holds the platform-wide migration files, NNNNNN_<what>.sql, in the
// directory root. It embeds every file of the folder so that the first
// platform-wide .sql file is picked up without touching this line;
// internal/migrate reads only the .sql files.
//
//go:embed *
var Files embed.FS

// Renamed returns, for each file that moved to another module after a
// database recorded it, the name orbit recorded it under then and its name
// now. Until every file moved into its module's folder, all of them lived in
// this folder as NNNNNN_<module>_<what>.sql; two were named after a module
// that does not own their table. A database migrated before the move keeps
// the old names, and internal/migrate accepts them as the same files (same
// version, same bytes). Entries are never removed: old databases keep them.
func Renamed() map[string]string {
	return map[string]string{
		// worker_sessions is the tasks module's table (its lease store).
		"000004_workers_sessions.sql": "000004_tasks_worker_sessions.sql",
		// event_sessions is the subscriptions module's table (its delivery store).
		"000006_events_sessions.sql": "000006_subscriptions_event_sessions.sql",
	}
}
