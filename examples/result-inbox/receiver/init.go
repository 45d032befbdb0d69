package receiver

import (
	"context"
	"fmt"
	"io"
	"strings"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
)

// Init runs the receiver's initial DDL on its own, empty database. It
// refuses a database that already has either table: it never repairs a
// partial schema or overwrites a structure. It prints
// `receiver_schema_initialized=true foreign_keys=0`.
func Init(ctx context.Context, cfg *Config, out io.Writer) error {
	db, err := OpenReceiverDB(ctx, cfg.ReceiverDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	var existing int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('receiver_inbox', 'receiver_task_views')`).Scan(&existing); err != nil {
		return fmt.Errorf("init: %w", redact(err))
	}
	if existing > 0 {
		return fmt.Errorf("init: the receiver tables already exist; init only creates them on an empty database and never alters existing ones")
	}
	for _, stmt := range Statements(resultinbox.Schema) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("init: %w (the schema may be partial now; drop what was created and run init again)", redact(err))
		}
	}
	var fks int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE()`).Scan(&fks); err != nil {
		return fmt.Errorf("init: %w", redact(err))
	}
	fmt.Fprintf(out, "receiver_schema_initialized=true foreign_keys=%d\n", fks)
	return nil
}

// Statements splits a schema file into statements: a statement ends where a
// line ends with ';'; lines starting with -- are comments.
func Statements(schema string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(schema, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	return out
}
