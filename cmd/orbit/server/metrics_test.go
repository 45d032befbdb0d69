package server_test

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
)

// TestO1_MetricsOnTheirOwnListener: GET /metrics answers on the metrics
// listener without a credential, in the text format, and the API listener
// does not serve it.
func TestO1_MetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	if strings.HasSuffix(srv.MetricsURL, ":9090/metrics") {
		t.Fatalf("test server metrics on %s: tests must never take 9090", srv.MetricsURL)
	}
	resp, err := http.Get(srv.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /metrics: %d %s, want 200 text/plain", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if r := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/metrics"}); r.Status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API listener: %d, want 404", r.Status)
	}
	post, err := http.Post(srv.MetricsURL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", post.StatusCode)
	}
}

// TestO1_MetricsDisabled: an empty server.metrics_listen serves no metrics.
func TestO1_MetricsDisabled(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, func(cfg *config.Config, _ modules.Instances) { cfg.Server.MetricsListen = "" })
	if srv.MetricsURL != "" {
		t.Errorf("metrics served on %s with metrics_listen empty", srv.MetricsURL)
	}
}

// TestO1_ScrapePassesPromlint lints a real scrape of a server that has
// served requests.
func TestO1_ScrapePassesPromlint(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{"tasks:submit"}})
	srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: "k1",
		Body: `{"queue_id":"` + cred.QueueID + `","input":{}}`})
	srv.RefreshMetrics(t)
	problems, err := promlint.New(strings.NewReader(srv.Scrape(t))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestO3_ScrapeQueriesNoDatabase closes the server's database pool and
// scrapes: every database-backed gauge is still there, from the last
// refresh, since a scrape only reads memory.
func TestO3_ScrapeQueriesNoDatabase(t *testing.T) {
	t.Parallel()
	pool, err := db.Open(context.Background(), testdb.NewDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.StartOn(t, pool, func(cfg *config.Config, _ modules.Instances) { cfg.Metrics.RefreshInterval = time.Hour })
	srv.Credential(t, servertest.CredentialParams{})
	srv.RefreshMetrics(t)
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(); err == nil {
		t.Fatal("the pool still answers after Close")
	}
	text := srv.Scrape(t)
	for _, family := range []string{"orbit_tasks{", "orbit_result_log_head_sequence{", "orbit_task_oldest_pending_age_seconds{",
		"orbit_metrics_refresh_queries ", "orbit_db_pool_in_use "} {
		if !strings.Contains(text, family) {
			t.Errorf("scrape without a database lacks %s", family)
		}
	}
}

// TestO3_RefreshStatementsAreIndexBacked runs one refresh over a queue with
// tasks, a subscription and a session, and EXPLAINs every statement it
// ran: each table it reads is read through an index.
func TestO3_RefreshStatementsAreIndexBacked(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{"tasks:submit", "events:manage"}})
	srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: "k1",
		Body: `{"queue_id":"` + cred.QueueID + `","input":{}}`})
	if r := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions", Token: cred.Token, IdempotencyKey: "s1",
		Body: `{"name":"s","queue_id":"` + cred.QueueID + `"}`}); r.Status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", r.Status, r.Body)
	}
	cost := srv.RefreshMetrics(t)
	if cost.Queries == 0 || int(cost.Queries) != len(cost.Statements) {
		t.Fatalf("cost %d queries, %d statements", cost.Queries, len(cost.Statements))
	}
	for _, st := range cost.Statements {
		explainIndexed(t, srv.DB, st.Query, st.Args)
	}
}

// explainIndexed fails the test when a table access of query has no usable
// index.
func explainIndexed(t *testing.T, pool *sql.DB, query string, args []any) {
	t.Helper()
	rows, err := pool.Query("EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]sql.NullString{}
		for i, c := range cols {
			row[c] = vals[i]
		}
		table := row["table"].String
		if !row["table"].Valid || strings.HasPrefix(table, "<") {
			continue // no table, or a derived table over an indexed one
		}
		indexed := row["key"].Valid || row["possible_keys"].Valid || strings.Contains(row["Extra"].String, "optimized away")
		if !indexed {
			t.Errorf("EXPLAIN %s\n  reads %s without an index: type %s, Extra %s", query, table, row["type"].String, row["Extra"].String)
		}
	}
}
