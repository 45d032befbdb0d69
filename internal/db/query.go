package db

import (
	"context"
	"database/sql"
	"strings"
)

// Querier is a pool or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Placeholders returns n comma-separated "?", for an IN list of n values.
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Args returns vs as query arguments, for an IN list of Placeholders.
func Args[T any](vs []T) []any {
	args := make([]any, len(vs))
	for i, v := range vs {
		args[i] = v
	}
	return args
}

// CaseByID is a CASE expression that gives each of n rows its own value by
// the row's id: its arguments are n (id, value) pairs, in any order.
func CaseByID(n int) string {
	return "CASE id" + strings.Repeat(" WHEN ? THEN ?", n) + " END"
}

// QueryStrings runs a query that selects one string column and returns its
// values in order.
func QueryStrings(ctx context.Context, q Querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// QueryCounts runs a query that selects a string key and a count, one row
// per key, and returns the counts by key; keys without a row are absent.
func QueryCounts(ctx context.Context, q Querier, query string, args ...any) (map[string]int, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			return nil, err
		}
		out[key] = n
	}
	return out, rows.Err()
}

// Scanner is a row to scan: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// QueryAll runs query and returns every row converted by scan, in order;
// the error of the query, of a scan or of the iteration is returned as it
// is, for the caller to say where it comes from.
func QueryAll[T any](ctx context.Context, q Querier, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
