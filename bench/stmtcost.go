package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// What one statement and one round trip cost the database and this
// process, measured on the bench's own server: the drain's and the live
// row's costs are a sum of statements, round trips and commits, and these
// rows say what each part costs on this machine.
//
// The rows run on a connector of their own that allows several statements
// in one call (multiStatements), which Orbit never does, so that a row can
// send the same statements in one round trip instead of several.

const (
	// statementCostConns is how many connections run each statement-cost
	// row, as many as the drain's consumers.
	statementCostConns = 4
	// statementCostRowsPerConn is how many table rows each connection
	// works on, apart from the others'.
	statementCostRowsPerConn = 16
)

// statementCostDuration is how long each statement-cost row runs: half a
// raw row's duration.
func (o options) statementCostDuration() time.Duration { return o.rawDur / 2 }

// statementCostRow is one kind of operation the rows repeat.
type statementCostRow struct {
	Name       string
	Statements int // per operation
	RoundTrips int // per operation
	run        func(ctx context.Context, pool *sql.DB, id int) error
}

// statementCostResult is what one row measured.
type statementCostResult struct {
	statementCostRow
	Ops  int64
	Cost cost
}

// statementCostRows are the operations measured, each on one row of a
// table of statementCostRowsPerConn rows per connection; id picks the row.
var statementCostRows = []statementCostRow{
	{Name: "DO 1", Statements: 1, RoundTrips: 1, run: func(ctx context.Context, pool *sql.DB, _ int) error {
		_, err := pool.ExecContext(ctx, "DO 1")
		return err
	}},
	{Name: "DO 1 four times in one round trip", Statements: 4, RoundTrips: 1, run: func(ctx context.Context, pool *sql.DB, _ int) error {
		_, err := pool.ExecContext(ctx, "DO 1; DO 1; DO 1; DO 1")
		return err
	}},
	{Name: "primary-key read, autocommit", Statements: 1, RoundTrips: 1, run: func(ctx context.Context, pool *sql.DB, id int) error {
		var v int64
		return pool.QueryRowContext(ctx, "SELECT v FROM counters WHERE id = ?", id).Scan(&v)
	}},
	{Name: "BEGIN, UPDATE, COMMIT", Statements: 3, RoundTrips: 3, run: func(ctx context.Context, pool *sql.DB, id int) error {
		return inTx(ctx, pool, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET v = v + 1 WHERE id = ?", id)
			return err
		})
	}},
	{Name: "BEGIN; UPDATE; COMMIT in one round trip", Statements: 3, RoundTrips: 1, run: func(ctx context.Context, pool *sql.DB, id int) error {
		_, err := pool.ExecContext(ctx, "START TRANSACTION; UPDATE counters SET v = v + 1 WHERE id = ?; COMMIT", id)
		return err
	}},
	{Name: "BEGIN, locking read, read, UPDATE, read, COMMIT", Statements: 6, RoundTrips: 6, run: func(ctx context.Context, pool *sql.DB, id int) error {
		return inTx(ctx, pool, func(tx *sql.Tx) error {
			var v int64
			for _, q := range []string{"SELECT v FROM counters WHERE id = ? FOR UPDATE", "SELECT v FROM counters WHERE id = ?"} {
				if err := tx.QueryRowContext(ctx, q, id).Scan(&v); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE counters SET v = v + 1 WHERE id = ?", id); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, "SELECT v FROM counters WHERE id = ?", id).Scan(&v)
		})
	}},
}

// runStatementCosts runs each statement-cost row for dur on
// statementCostConns connections, each connection on rows of its own.
func runStatementCosts(ctx context.Context, e *env, dur time.Duration) ([]statementCostResult, error) {
	if _, err := e.admin.ExecContext(ctx, "CREATE DATABASE bench_statements"); err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(e.mysql.DSN("bench_statements"))
	if err != nil {
		return nil, err
	}
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	pool := sql.OpenDB(connector)
	defer pool.Close()
	pool.SetMaxOpenConns(statementCostConns)
	pool.SetMaxIdleConns(statementCostConns)
	if _, err := pool.ExecContext(ctx, `CREATE TABLE counters (id INT NOT NULL PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
		return nil, err
	}
	for id := range statementCostRowsPerConn * statementCostConns {
		if _, err := pool.ExecContext(ctx, `INSERT INTO counters (id, v) VALUES (?, 0)`, id); err != nil {
			return nil, err
		}
	}
	var out []statementCostResult
	for _, row := range statementCostRows {
		ops, c, err := runFor(ctx, e, statementCostConns, dur, func(worker, i int) error {
			return row.run(ctx, pool, worker*statementCostRowsPerConn+i%statementCostRowsPerConn)
		})
		if err != nil {
			return nil, fmt.Errorf("statement cost %q: %w", row.Name, err)
		}
		out = append(out, statementCostResult{statementCostRow: row, Ops: ops, Cost: c})
	}
	return out, nil
}

// summary is one line for the progress log.
func (x statementCostResult) summary() string {
	return fmt.Sprintf("%s: %s/s; CPU per operation mysqld %s µs, this process %s µs",
		x.Name, num(float64(x.Ops)/x.Cost.Elapsed.Seconds()), num(perEvent(x.Cost.MysqldCPU, int(x.Ops))), num(perEvent(x.Cost.SelfCPU, int(x.Ops))))
}
