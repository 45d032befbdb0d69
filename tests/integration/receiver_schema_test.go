package integration_test

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

// receiverTables are the receiver's tables in name order: the two of R-10
// and the ACK intents of K-13.
var receiverTables = []string{"receiver_ack_intents", "receiver_inbox", "receiver_task_views"}

// intentsTable holds the ACK intents (K-13).
const intentsTable = "receiver_ack_intents"

// the receiver's schema has two tables with 17 columns,
// each with a Chinese comment, and no foreign key.
func TestR20_SchemaHasSeventeenChineseCommentsAndNoForeignKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rows, err := env.receiver.QueryContext(f.ctx, `SELECT TABLE_NAME, COLUMN_NAME, COLUMN_COMMENT FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('receiver_inbox', 'receiver_task_views')
		ORDER BY TABLE_NAME, ORDINAL_POSITION`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	columns := 0
	for rows.Next() {
		var table, column, comment string
		if err := rows.Scan(&table, &column, &comment); err != nil {
			t.Fatal(err)
		}
		columns++
		if !strings.ContainsFunc(comment, func(r rune) bool { return unicode.Is(unicode.Han, r) }) {
			t.Errorf("%s.%s: comment %q is not Chinese", table, column, comment)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if columns != 17 {
		t.Errorf("the two tables have %d columns, want 17", columns)
	}

	var fks int
	if err := env.receiver.QueryRowContext(f.ctx, `SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE()`).Scan(&fks); err != nil {
		t.Fatal(err)
	}
	if fks != 0 {
		t.Errorf("the receiver database has %d foreign keys, want 0", fks)
	}

	// The identities of R-10.
	for table, want := range map[string][]string{
		"receiver_inbox":      {"consumer_name", "queue_id", "event_id"},
		"receiver_task_views": {"consumer_name", "queue_id", "task_id"},
	} {
		if got := f.uniqueKeys(table); !containsKey(got, want) {
			t.Errorf("%s: unique keys %v, want one on %v", table, got, want)
		}
	}
}

// uniqueKeys returns the columns of each unique index of a receiver table.
func (f *fixture) uniqueKeys(table string) [][]string {
	f.t.Helper()
	rows, err := env.receiver.QueryContext(f.ctx, `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, table)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	byIndex := map[string][]string{}
	var order []string
	for rows.Next() {
		var index, column string
		if err := rows.Scan(&index, &column); err != nil {
			f.t.Fatal(err)
		}
		if _, ok := byIndex[index]; !ok {
			order = append(order, index)
		}
		byIndex[index] = append(byIndex[index], column)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	var out [][]string
	for _, index := range order {
		out = append(out, byIndex[index])
	}
	return out
}

func containsKey(keys [][]string, want []string) bool {
	return slices.ContainsFunc(keys, func(k []string) bool { return slices.Equal(k, want) })
}

// the platform and the receiver live in separate databases:
// orbit_test holds the migrated platform and no receiver table;
// orbit_receiver_test holds exactly the receiver's tables.
func TestR19_PlatformAndReceiverDatabasesAreSeparate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tablesOf := func(database string) []string {
		rows, err := env.receiver.QueryContext(f.ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME`, database)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			out = append(out, name)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := tablesOf(receiverDatabase); !slices.Equal(got, receiverTables) {
		t.Errorf("%s holds %v, want exactly %v", receiverDatabase, got, receiverTables)
	}
	platform := tablesOf(platformDatabase)
	for _, name := range platform {
		if strings.HasPrefix(name, "receiver_") {
			t.Errorf("%s holds receiver table %s", platformDatabase, name)
		}
	}
	for _, want := range []string{"schema_migrations", "tasks", "result_events"} {
		if !slices.Contains(platform, want) {
			t.Errorf("%s lacks %s; tables: %v", platformDatabase, want, platform)
		}
	}
}

// K-13: the ACK intents table has a Chinese comment on each of its 7
// columns, one intent per receiving purpose and delivery, and no foreign
// key (the R-20 check of the whole database covers it).
func TestK13_AckIntentsTable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rows, err := env.receiver.QueryContext(f.ctx, `SELECT COLUMN_NAME, COLUMN_COMMENT FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, intentsTable)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var columns []string
	for rows.Next() {
		var column, comment string
		if err := rows.Scan(&column, &comment); err != nil {
			t.Fatal(err)
		}
		columns = append(columns, column)
		if !strings.ContainsFunc(comment, func(r rune) bool { return unicode.Is(unicode.Han, r) }) {
			t.Errorf("%s.%s: comment %q is not Chinese", intentsTable, column, comment)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"consumer_name", "subscription_id", "delivery_id", "epoch", "lease_secret", "event_id", "created_at"}
	if !slices.Equal(columns, want) {
		t.Errorf("%s columns %v, want %v", intentsTable, columns, want)
	}
	if got := f.uniqueKeys(intentsTable); !containsKey(got, []string{"consumer_name", "subscription_id", "delivery_id"}) {
		t.Errorf("%s: unique keys %v, want one on (consumer_name, subscription_id, delivery_id)", intentsTable, got)
	}
}
