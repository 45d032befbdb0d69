package receiver

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
)

// Init creates the receiver's schema in its own database (R-2, K-13). On
// an empty database it runs all of schema.sql and prints
// `receiver_schema_initialized=true foreign_keys=0`. On a database that
// holds exactly the tables of an earlier schema generation (see
// resultinbox.SchemaGenerations) it creates only the tables added since and
// prints `receiver_schema_upgraded=true created=<tables> foreign_keys=0`;
// on an up-to-date database it changes nothing and prints
// `receiver_schema_current=true foreign_keys=0`. Any other set of receiver
// tables is a partial schema: Init refuses it and changes nothing. It
// never alters, repairs or overwrites an existing table, so it is safe to
// run again.
func Init(ctx context.Context, cfg *Config, out io.Writer) error {
	db, err := OpenReceiverDB(ctx, cfg.ReceiverDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	plan, err := planSchema(resultinbox.Schema, resultinbox.SchemaGenerations)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	existing, err := existingTables(ctx, db, plan.tables)
	if err != nil {
		return fmt.Errorf("init: %w", redact(err))
	}
	generation := plan.generationOf(existing)
	if generation < 0 {
		return fmt.Errorf("init: the database holds the receiver tables %s, which are no complete schema generation; init never repairs a partial schema or alters existing tables (drop what a failed init created and run it again)",
			strings.Join(existing, ", "))
	}
	var created []string
	for _, gen := range plan.gens[generation:] {
		for _, table := range gen {
			if _, err := db.ExecContext(ctx, plan.create[table]); err != nil {
				return fmt.Errorf("init: create %s: %w (the schema may be partial now; drop what was created and run init again)", table, redact(err))
			}
			created = append(created, table)
		}
	}
	var fks int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE()`).Scan(&fks); err != nil {
		return fmt.Errorf("init: %w", redact(err))
	}
	switch {
	case generation == 0:
		fmt.Fprintf(out, "receiver_schema_initialized=true foreign_keys=%d\n", fks)
	case len(created) > 0:
		fmt.Fprintf(out, "receiver_schema_upgraded=true created=%s foreign_keys=%d\n", strings.Join(created, ","), fks)
	default:
		fmt.Fprintf(out, "receiver_schema_current=true foreign_keys=%d\n", fks)
	}
	return nil
}

// schemaPlan is schema.sql read against the schema generations.
type schemaPlan struct {
	gens   [][]string        // the tables each generation added
	tables []string          // every receiver table, in generation order
	create map[string]string // the CREATE TABLE statement of each table
}

var createTable = regexp.MustCompile(`^CREATE TABLE ([a-z_]+) \(`)

// planSchema checks that schema holds one CREATE TABLE per table of the
// generations, in their order, and nothing else.
func planSchema(schema string, generations [][]string) (*schemaPlan, error) {
	p := &schemaPlan{gens: generations, create: map[string]string{}}
	for _, gen := range generations {
		p.tables = append(p.tables, gen...)
	}
	stmts := Statements(schema)
	if len(stmts) != len(p.tables) {
		return nil, fmt.Errorf("schema.sql holds %d statements for %d tables", len(stmts), len(p.tables))
	}
	for i, stmt := range stmts {
		m := createTable.FindStringSubmatch(stmt)
		if m == nil || m[1] != p.tables[i] {
			return nil, fmt.Errorf("schema.sql statement %d is not CREATE TABLE %s", i+1, p.tables[i])
		}
		p.create[m[1]] = stmt
	}
	return p, nil
}

// generationOf returns n when existing holds exactly the tables of the
// first n generations, or -1.
func (p *schemaPlan) generationOf(existing []string) int {
	have := 0
	for n, gen := range p.gens {
		if slices.Equal(existing, p.tables[:have]) {
			return n
		}
		have += len(gen)
	}
	if slices.Equal(existing, p.tables) {
		return len(p.gens)
	}
	return -1
}

// existingTables returns which of tables exist in the DSN's database, in
// the order of tables.
func existingTables(ctx context.Context, db *sql.DB, tables []string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		found[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []string
	for _, t := range tables {
		if found[t] {
			out = append(out, t)
		}
	}
	return out, nil
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
