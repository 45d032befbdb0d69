package receiver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"

	resultinbox "github.com/orbitrun/orbit/examples/result-inbox"
)

// The commands' checks that come before any network or database work.

// R-23, K-12: the CLI knows init, demo, consume and prune and nothing
// else: there is no fault switch.
func TestR23_NoFaultCommands(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"", "help", "fault", "kill-after-commit", "INIT"} {
		if err := Main(t.Context(), cmd, nil, nil); !errors.Is(err, ErrUsage) {
			t.Errorf("Main(%q) = %v, want ErrUsage", cmd, err)
		}
	}
}

// a receiver name that is not 1-64 ASCII letters, digits, '.', '_' or
// '-' starting with a letter or digit is refused by demo and consume before
// they contact anything (their credentials here point nowhere).
func TestR8_InvalidReceiverNameIsRefused(t *testing.T) {
	t.Parallel()
	creds := &orbit.Credentials{URL: "http://127.0.0.1:1", Token: "token", QueueID: "0123456789abcdef0123456789abcdef"}
	for _, name := range []string{"-view", ".view", "view name", "vïew", strings.Repeat("a", 65), ""} {
		cfg := &Config{Credentials: creds, ReceiverDSN: "r@tcp(127.0.0.1:1)/receiver_example", ReceiverName: name, SubscriptionID: "0123456789abcdef0123456789abcdef"}
		if err := Consume(t.Context(), cfg, nil, nil); err == nil || !strings.Contains(err.Error(), EnvReceiverName) {
			t.Errorf("consume with receiver name %q = %v, want it refused", name, err)
		}
		if err := Demo(t.Context(), cfg, nil, nil); err == nil || !strings.Contains(err.Error(), EnvReceiverName) {
			t.Errorf("demo with receiver name %q = %v, want it refused", name, err)
		}
	}
	for _, name := range []string{DefaultReceiverName, "a", "9orders", "Orders_View.v2-x", strings.Repeat("a", 64)} {
		cfg := &Config{Credentials: creds, ReceiverName: name, SubscriptionID: "0123456789abcdef0123456789abcdef"}
		err := Consume(t.Context(), cfg, nil, nil) // gets as far as the (closed) server
		if err == nil || !strings.Contains(err.Error(), "consume: subscription") {
			t.Errorf("consume refused the valid receiver name %q: %v", name, err)
		}
	}
}

// consume needs the id of an existing subscription.
func TestR6_ConsumeNeedsASubscription(t *testing.T) {
	t.Parallel()
	cfg := &Config{ReceiverName: DefaultReceiverName}
	if err := Consume(t.Context(), cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "ORBIT_SUBSCRIPTION_ID is not set") {
		t.Fatalf("consume without a subscription = %v", err)
	}
}

// K-13: init's statements are schema.sql's CREATE TABLE
// statements, one per table of the schema generations, in order, with no
// foreign key, cascade or delete.
func TestR2_InitRunsTheCreateStatementsOfEachGeneration(t *testing.T) {
	t.Parallel()
	stmts := Statements(resultinbox.Schema)
	if len(stmts) != 3 || !strings.HasPrefix(stmts[0], "CREATE TABLE receiver_inbox (") ||
		!strings.HasPrefix(stmts[1], "CREATE TABLE receiver_task_views (") ||
		!strings.HasPrefix(stmts[2], "CREATE TABLE receiver_ack_intents (") {
		t.Fatalf("schema statements: %q", stmts)
	}
	if _, err := planSchema(resultinbox.Schema, resultinbox.SchemaGenerations); err != nil {
		t.Fatalf("schema.sql does not match the generations: %v", err)
	}
	for _, s := range stmts {
		if strings.HasSuffix(s, ";") {
			t.Errorf("statement keeps its ';': %.40s…", s)
		}
		for _, banned := range []string{"FOREIGN KEY", "REFERENCES", "CASCADE", "DELETE", "DROP", "ALTER"} {
			if strings.Contains(strings.ToUpper(s), banned) {
				t.Errorf("schema statement contains %s", banned)
			}
		}
	}
	got := Statements("-- a comment; not a statement\n\nCREATE TABLE a (\n  x INT -- no\n);\n  -- another\nCREATE TABLE b (y INT);\n")
	if len(got) != 2 || got[0] != "CREATE TABLE a (\n  x INT -- no\n)" || got[1] != "CREATE TABLE b (y INT)" {
		t.Errorf("Statements split %q", got)
	}
}

// A Ctrl-C while consume is still starting (here while the platform does
// not answer yet) is a requested stop: Consume returns nil, so
// the command exits 0.
func TestReceiverConsume_CtrlCWhileStartingIsNoError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	creds := &orbit.Credentials{URL: srv.URL, Token: "token", QueueID: "0123456789abcdef0123456789abcdef"}
	cfg := &Config{Credentials: creds, ReceiverName: DefaultReceiverName, SubscriptionID: "0123456789abcdef0123456789abcdef"}
	ctx, stop := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, stop)
	if err := Consume(ctx, cfg, io.Discard, nil); err != nil {
		t.Errorf("consume stopped while starting = %v, want nil", err)
	}
}

// K-13: init recognises exactly the table sets of complete generations;
// anything else is a partial schema it refuses.
func TestK13_InitKnowsTheSchemaGenerations(t *testing.T) {
	t.Parallel()
	plan, err := planSchema(resultinbox.Schema, resultinbox.SchemaGenerations)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		existing []string
		want     int
	}{
		{nil, 0},
		{[]string{"receiver_inbox", "receiver_task_views"}, 1},
		{[]string{"receiver_inbox", "receiver_task_views", "receiver_ack_intents"}, 2},
		{[]string{"receiver_inbox"}, -1},
		{[]string{"receiver_task_views"}, -1},
		{[]string{"receiver_ack_intents"}, -1},
		{[]string{"receiver_inbox", "receiver_ack_intents"}, -1},
	} {
		if got := plan.generationOf(tc.existing); got != tc.want {
			t.Errorf("generationOf(%v) = %d, want %d", tc.existing, got, tc.want)
		}
	}
	if _, err := planSchema(resultinbox.Schema, [][]string{{"receiver_inbox", "receiver_task_views"}}); err == nil {
		t.Error("a schema with a table no generation names was accepted")
	}
}

// K-12: prune needs the id of an existing subscription and a valid receiver
// name before it contacts anything.
func TestK12_PruneChecksItsConfiguration(t *testing.T) {
	t.Parallel()
	creds := &orbit.Credentials{URL: "http://127.0.0.1:1", Token: "token", QueueID: "0123456789abcdef0123456789abcdef"}
	if err := Prune(t.Context(), &Config{Credentials: creds, ReceiverName: DefaultReceiverName}, nil); err == nil || !strings.Contains(err.Error(), EnvSubscriptionID) {
		t.Errorf("prune without a subscription = %v", err)
	}
	cfg := &Config{Credentials: creds, ReceiverName: "-bad", SubscriptionID: "0123456789abcdef0123456789abcdef"}
	if err := Prune(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), EnvReceiverName) {
		t.Errorf("prune with an invalid receiver name = %v", err)
	}
}
