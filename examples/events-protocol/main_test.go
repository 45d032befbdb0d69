package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// eventAccess is what `orbit admin bootstrap --event-access` grants.
var eventAccess = []string{
	auth.PermEventsManage, auth.PermEventsRead, auth.PermEventsConsume,
	auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel,
}

// lineValues parses the key=value pairs of one output line.
func lineValues(t *testing.T, line string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("line %q: %q is not key=value", line, f)
		}
		kv[k] = v
	}
	return kv
}

// TestRunResendsTheProofAndGetsDeduplicated runs the example against a real
// server and checks its steps, its final line, that nothing secret was
// printed, and that the server recorded one acknowledgement, from the
// first connection.
func TestRunResendsTheProofAndGetsDeduplicated(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: eventAccess})
	creds := &orbit.Credentials{URL: srv.URL, Token: cred.Token, QueueID: cred.QueueID}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, creds, "test0001"); err != nil {
		t.Fatalf("run = %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	steps := map[string]map[string]string{}
	var order []string
	for _, l := range lines {
		kv := lineValues(t, l)
		steps[kv["step"]] = kv
		order = append(order, kv["step"])
	}
	want := "credential create submit cancel connect deliver ack recorded drop reconnect ack-again ack-reply leave-paused done"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("steps = %s\nwant    %s", got, want)
	}
	last := lineValues(t, lines[len(lines)-1])
	deliveryID := steps["deliver"]["delivery_id"]
	if last["step"] != "done" || last["deduplicated"] != "true" || last["delivery_id"] != deliveryID ||
		last["subscription_id"] != steps["create"]["subscription_id"] {
		t.Errorf("final line = %q", lines[len(lines)-1])
	}
	first, second := steps["connect"]["session_id"], steps["reconnect"]["session_id"]
	if first == "" || first == second || steps["reconnect"]["previous_session_id"] != first {
		t.Errorf("sessions: connect %q, reconnect %q", first, second)
	}
	if r := steps["ack-reply"]; r["deduplicated"] != "true" || r["reply_to"] != steps["ack-again"]["message_id"] ||
		r["epoch"] != steps["ack"]["epoch"] || r["acknowledged_at"] != steps["recorded"]["acknowledged_at"] {
		t.Errorf("ack-reply = %v; want the original acknowledgement, deduplicated", r)
	}
	if steps["deliver"]["task_id"] != steps["cancel"]["task_id"] || steps["deliver"]["event_type"] != orbit.EventTypeTaskCancelled {
		t.Errorf("deliver = %v", steps["deliver"])
	}
	if strings.Contains(out.String(), cred.Token) || regexp.MustCompile(`[A-Za-z0-9_-]{43}`).MatchString(out.String()) {
		t.Errorf("the output shows the token or a lease secret:\n%s", out.String())
	}

	var rows int
	var session string
	if err := srv.DB.QueryRow(`SELECT COUNT(*), MIN(session_id) FROM delivery_acks WHERE delivery_id = ?`, deliveryID).Scan(&rows, &session); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || session != first {
		t.Errorf("delivery_acks: %d rows, session %s; want one row from the first session %s", rows, session, first)
	}
	var enabled bool
	if err := srv.DB.QueryRow(`SELECT enabled FROM subscriptions WHERE id = ?`, steps["create"]["subscription_id"]).Scan(&enabled); err != nil || enabled {
		t.Errorf("subscription enabled = %v, %v; want it left paused", enabled, err)
	}
}

func TestRunRefusesCredentialWithoutEventAccess(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{
		Permissions: []string{auth.PermTasksSubmit, auth.PermTasksCancel, auth.PermEventsManage, auth.PermEventsRead},
	})
	var out bytes.Buffer
	err := run(context.Background(), &out, &orbit.Credentials{URL: srv.URL, Token: cred.Token, QueueID: cred.QueueID}, "test0002")
	var se *stepError
	if !errors.As(err, &se) || !se.config || se.step != "credential" || !strings.Contains(err.Error(), "events:consume") {
		t.Fatalf("run = %v; want a credential problem naming events:consume", err)
	}
	if out.Len() != 0 {
		t.Errorf("output = %q; want nothing before the check", out.String())
	}
}

func TestEventsURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":          "ws://127.0.0.1:8080/v1/events/connect",
		"https://orbit.example.com/":     "wss://orbit.example.com/v1/events/connect",
		"https://orbit.example.com/base": "wss://orbit.example.com/base/v1/events/connect",
	} {
		if got, err := eventsURL(in); err != nil || got != want {
			t.Errorf("eventsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://x", "127.0.0.1:8080", "http://"} {
		if _, err := eventsURL(in); err == nil {
			t.Errorf("eventsURL(%q) succeeded", in)
		}
	}
}
