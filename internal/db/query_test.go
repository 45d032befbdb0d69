package db_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

func TestQueryAll_ScansEveryRowInOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	if _, err := pool.Exec("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(8) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec("INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')"); err != nil {
		t.Fatal(err)
	}
	scanName := func(row db.Scanner) (string, error) {
		var name string
		err := row.Scan(&name)
		return name, err
	}
	got, err := db.QueryAll(ctx, pool, scanName, "SELECT name FROM items WHERE id > ? ORDER BY id DESC", 1)
	if err != nil || !slices.Equal(got, []string{"c", "b"}) {
		t.Errorf("QueryAll = %q, %v; want [c b]", got, err)
	}
	none, err := db.QueryAll(ctx, pool, scanName, "SELECT name FROM items WHERE id > 9")
	if err != nil || len(none) != 0 {
		t.Errorf("QueryAll of no rows = %q, %v", none, err)
	}
	bad := errors.New("bad row")
	if _, err := db.QueryAll(ctx, pool, func(db.Scanner) (string, error) { return "", bad }, "SELECT name FROM items"); !errors.Is(err, bad) {
		t.Errorf("QueryAll with a failing scan = %v, want %v", err, bad)
	}
	if _, err := db.QueryAll(ctx, pool, scanName, "SELECT nothing FROM items"); err == nil {
		t.Error("QueryAll of a bad query returned no error")
	}
}

func TestArgs_FillAnInList(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ids := []string{"b", "c"}
	got, err := db.QueryStrings(context.Background(), pool,
		`SELECT v FROM (SELECT 'a' AS v UNION ALL SELECT 'b' UNION ALL SELECT 'c') t WHERE v IN (`+db.Placeholders(len(ids))+`) ORDER BY v`,
		db.Args(ids)...)
	if err != nil || !slices.Equal(got, ids) {
		t.Errorf("QueryStrings with Args = %q, %v; want %q", got, err, ids)
	}
	if len(db.Args([]int(nil))) != 0 {
		t.Error("Args of nothing is not empty")
	}
}

func TestQueryCounts_ByKey(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got, err := db.QueryCounts(context.Background(), pool,
		`SELECT v, COUNT(*) FROM (SELECT 'a' AS v UNION ALL SELECT 'b' UNION ALL SELECT 'b') t WHERE v <> ? GROUP BY v`, "c")
	if err != nil || len(got) != 2 || got["a"] != 1 || got["b"] != 2 {
		t.Errorf("QueryCounts = %v, %v; want a:1 b:2", got, err)
	}
}
