package integration_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/db"
)

// What `receiver init` prints (R-2, K-13): on an empty database, on a
// first-generation schema it upgrades, and on a current schema.
const (
	initLine    = "receiver_schema_initialized=true foreign_keys=0\n"
	upgradeLine = "receiver_schema_upgraded=true created=receiver_ack_intents foreign_keys=0\n"
	currentLine = "receiver_schema_current=true foreign_keys=0\n"
)

// runInit runs receiver.Init on dsn and returns its output and error.
func runInit(ctx context.Context, dsn string) (string, error) {
	var out bytes.Buffer
	err := receiver.Init(ctx, &receiver.Config{ReceiverDSN: dsn}, &out)
	return out.String(), err
}

// createTables returns the SHOW CREATE TABLE text of the receiver tables
// that exist in database, by table.
func createTables(t *testing.T, ctx context.Context, database string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range receiverTables {
		var name, ddl string
		err := env.receiver.QueryRowContext(ctx, "SHOW CREATE TABLE `"+database+"`.`"+table+"`").Scan(&name, &ddl)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // no such table
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[table] = ddl
	}
	return out
}

// ORBIT_RECEIVER_DSN must be set and must name the database; init and
// the demo refuse otherwise with a clear error that repeats nothing of the
// DSN, before touching any database or the platform.
func TestR1_DSNMustNameTheDatabase(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg, err := mysql.ParseDSN(env.receiverDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	cfg.Passwd = "pw-" + db.NewID()
	noDatabase := cfg.FormatDSN()

	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"NotSet", "", "ORBIT_RECEIVER_DSN is not set"},
		{"NoDatabase", noDatabase, "ORBIT_RECEIVER_DSN must name the database explicitly"},
		{"NotADSN", "receiver:" + cfg.Passwd + "@tcp(127.0.0.1:3306", "ORBIT_RECEIVER_DSN: not a valid MySQL DSN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runInit(f.ctx, tc.dsn)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("init = %v, want an error saying %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("init printed %q on failure", out)
			}
			if strings.Contains(err.Error(), cfg.Passwd) || (tc.dsn != "" && strings.Contains(err.Error(), cfg.Addr)) {
				t.Errorf("the error repeats the DSN: %v", err)
			}
		})
	}

	t.Run("DemoRefusesBeforeSubscribing", func(t *testing.T) {
		p := startPlatform(t)
		c := p.bootstrap(t, "inbox-demo")
		out, _, _, err := runDemo(f.ctx, c, noDatabase, newConsumer())
		if err == nil || !strings.Contains(err.Error(), "must name the database explicitly") {
			t.Fatalf("demo = %v, want the DSN refused", err)
		}
		var subs, tasks int
		if err := env.platform.QueryRowContext(f.ctx, `SELECT
			(SELECT COUNT(*) FROM subscriptions WHERE queue_id = ?), (SELECT COUNT(*) FROM tasks WHERE queue_id = ?)`,
			c.QueueID, c.QueueID).Scan(&subs, &tasks); err != nil {
			t.Fatal(err)
		}
		if subs != 0 || tasks != 0 || out != "" {
			t.Errorf("a refused demo made %d subscriptions and %d tasks and printed %q", subs, tasks, out)
		}
	})
}

// R-2, K-13: init runs schema.sql on an empty database and prints its
// line; run again it changes nothing and says the schema is current; on a
// database that holds the first generation's two tables it creates only
// the ACK intents table; on any other set of receiver tables (a partial
// schema) it refuses and changes nothing: it never repairs a partial schema
// or alters an existing table.
func TestR2_InitCreatesMissingGenerationsOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	want := createTables(t, f.ctx, receiverDatabase)
	generation1 := receiver.Statements(resultinbox.Schema)[:2]
	if !strings.Contains(generation1[0], "CREATE TABLE receiver_inbox") || !strings.Contains(generation1[1], "CREATE TABLE receiver_task_views") {
		t.Fatalf("schema.sql no longer starts with the first generation's tables: %.60s", generation1[0])
	}
	// createIn runs statements in a database of its own.
	createIn := func(t *testing.T, stmts ...string) (dsn, name string) {
		dsn, name = emptyDatabase(t, f.ctx)
		pool, err := openReceiver(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		for _, stmt := range stmts {
			if _, err := pool.ExecContext(f.ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		return dsn, name
	}

	t.Run("EmptyDatabase", func(t *testing.T) {
		dsn, name := emptyDatabase(t, f.ctx)
		out, err := runInit(f.ctx, dsn)
		if err != nil || out != initLine {
			t.Fatalf("init on an empty database = %q, %v; want %q", out, err, initLine)
		}
		created := createTables(t, f.ctx, name)
		if !maps.Equal(created, want) {
			t.Fatalf("init created\n%v\nwant the tables of schema.sql\n%v", created, want)
		}

		out, err = runInit(f.ctx, dsn)
		if err != nil || out != currentLine {
			t.Fatalf("init again = %q, %v; want %q", out, err, currentLine)
		}
		if after := createTables(t, f.ctx, name); !maps.Equal(after, created) {
			t.Errorf("init on a current schema changed the tables")
		}
	})

	t.Run("UpgradesTheFirstGeneration", func(t *testing.T) {
		dsn, name := createIn(t, generation1...)
		before := createTables(t, f.ctx, name)
		out, err := runInit(f.ctx, dsn)
		if err != nil || out != upgradeLine {
			t.Fatalf("init on a first-generation schema = %q, %v; want %q", out, err, upgradeLine)
		}
		after := createTables(t, f.ctx, name)
		if !maps.Equal(after, want) {
			t.Fatalf("after the upgrade the tables are\n%v\nwant\n%v", after, want)
		}
		for table, ddl := range before {
			if after[table] != ddl {
				t.Errorf("the upgrade altered %s", table)
			}
		}
		if out, err := runInit(f.ctx, dsn); err != nil || out != currentLine {
			t.Errorf("init after the upgrade = %q, %v; want %q", out, err, currentLine)
		}
	})

	t.Run("PartialSchema", func(t *testing.T) {
		for _, stmts := range [][]string{
			generation1[:1],
			{receiver.Statements(resultinbox.Schema)[2]},
		} {
			dsn, name := createIn(t, stmts...)
			before := createTables(t, f.ctx, name)
			out, err := runInit(f.ctx, dsn)
			if err == nil || !strings.Contains(err.Error(), "no complete schema generation") || out != "" {
				t.Fatalf("init on a partial schema = %q, %v; want it refused", out, err)
			}
			if got := createTables(t, f.ctx, name); !maps.Equal(got, before) {
				t.Errorf("init touched a partial schema: tables now %v", keys(got))
			}
		}
	})

	t.Run("ReceiverTestDatabase", func(t *testing.T) {
		out, err := runInit(f.ctx, env.receiverDSN)
		if err != nil || out != currentLine {
			t.Fatalf("init on %s = %q, %v; want %q", receiverDatabase, out, err, currentLine)
		}
		if after := createTables(t, f.ctx, receiverDatabase); !maps.Equal(after, want) {
			t.Errorf("init on a current schema changed the tables")
		}
	})
}

// the running receiver needs only SELECT, INSERT and UPDATE on its
// Inbox and view (and, for consume, DELETE on its ACK intents, K-13): the
// whole demo runs with an account that holds nothing else, so no receiver
// code deletes from the Inbox or view, alters or touches another table.
func TestR2_RunningAccountNeedsOnlySelectInsertUpdate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dsn, _ := receiverAccount(t, f.ctx)
	pool, err := openReceiver(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The account really is that narrow.
	_, err = pool.ExecContext(f.ctx, "DELETE FROM receiver_inbox WHERE consumer_name = ?", "nobody")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1142 { // command denied
		t.Fatalf("DELETE with the running account = %v, want it denied", err)
	}

	p := startPlatform(t)
	c := p.bootstrap(t, "inbox-demo")
	name := newConsumer()
	out, logs, took, err := runDemo(f.ctx, c, dsn, name)
	if err != nil {
		t.Fatalf("demo with a SELECT/INSERT/UPDATE account: %v\noutput:\n%s\nlog:\n%s", err, out, logs)
	}
	checkDemoSucceeded(t, f.ctx, c, name, out, took)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
