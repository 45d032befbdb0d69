package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// bootstrapPermissions are what `orbit admin bootstrap --event-access`
// grants.
var bootstrapPermissions = []string{
	"tasks:submit", "tasks:read", "tasks:cancel", "events:read", "events:consume", "events:manage",
}

// outputLine is one printed line: its step and its key=value pairs.
type outputLine struct {
	step string
	kv   map[string]string
}

// parseLines splits the example's output into lines of key=value pairs,
// unquoting quoted values.
func parseLines(t *testing.T, out string) []outputLine {
	t.Helper()
	var lines []outputLine
	for _, text := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		kv := map[string]string{}
		rest := text
		for rest != "" {
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				t.Fatalf("line %q: %q has no '='", text, rest)
			}
			if strings.HasPrefix(v, `"`) {
				q, err := strconv.QuotedPrefix(v)
				if err != nil {
					t.Fatalf("line %q: %v", text, err)
				}
				rest = strings.TrimPrefix(v[len(q):], " ")
				v, _ = strconv.Unquote(q)
			} else {
				v, rest, _ = strings.Cut(v, " ")
			}
			if _, dup := kv[k]; dup {
				t.Fatalf("line %q repeats %s", text, k)
			}
			kv[k] = v
		}
		lines = append(lines, outputLine{step: kv["step"], kv: kv})
	}
	return lines
}

// writeCredentials writes a credentials file as bootstrap does and returns
// its path.
func writeCredentials(t *testing.T, fields map[string]string) string {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The example, started as its main does, reads the credentials named by
// ORBIT_CREDENTIALS_FILE with ORBIT_URL overriding the file's url, prints
// one line per step and leaves the subscription paused (S-26).
func TestS26_ExamplePrintsEveryStep(t *testing.T) {
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: bootstrapPermissions})
	path := writeCredentials(t, map[string]string{
		"url": "http://127.0.0.1:1", "token": cred.Token, "queue_id": cred.QueueID, "credential_id": cred.CredentialID,
	})
	t.Setenv(orbit.EnvCredentialsFile, path)
	t.Setenv(orbit.EnvURL, srv.URL)
	t.Setenv(orbit.EnvToken, "")
	t.Setenv(orbit.EnvQueueID, "")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if code := mainCode(ctx, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s\nstdout:\n%s", code, &stderr, &stdout)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q; want nothing", &stderr)
	}
	if strings.Contains(stdout.String(), cred.Token) {
		t.Fatal("the output contains the token")
	}
	lines := parseLines(t, stdout.String())
	var steps []string
	for _, l := range lines {
		steps = append(steps, l.step)
	}
	want := []string{"credential", "create", "replay", "get", "pause", "get", "resume", "submit", "cancel",
		"wait", "list", "retry", "get", "leave-paused", "done"}
	if !slices.Equal(steps, want) {
		t.Fatalf("steps = %v\nwant    %v\noutput:\n%s", steps, want, &stdout)
	}
	at := func(i int) map[string]string { return lines[i].kv }
	subID := at(1)["subscription_id"]
	expect := []struct {
		line int
		kv   map[string]string
	}{
		{0, map[string]string{"credential_id": cred.CredentialID, "namespace": "ns", "queue_id": cred.QueueID}},
		{1, map[string]string{"revision": "1", "enabled": "true", "cursor_sequence": "0", "deduplicated": "false"}},
		{2, map[string]string{"subscription_id": subID, "revision": "1", "deduplicated": "true"}},
		{3, map[string]string{"subscription_id": subID, "revision": "1", "enabled": "true", "pending_count": "0",
			"max_pending": "100", "max_attempts": "20", "types": "task.cancelled,task.failed,task.needs_review,task.succeeded"}},
		{4, map[string]string{"subscription_id": subID, "expected_revision": "1", "revision": "2", "enabled": "false", "deduplicated": "false"}},
		{5, map[string]string{"revision": "2", "enabled": "false"}},
		{6, map[string]string{"expected_revision": "2", "revision": "3", "enabled": "true", "deduplicated": "false"}},
		{7, map[string]string{"state": "PENDING"}},
		{8, map[string]string{"task_id": at(7)["task_id"], "state": "CANCELLED"}},
		{9, map[string]string{"event_type": "task.cancelled", "task_id": at(7)["task_id"], "sequence": "1"}},
		{10, map[string]string{"deliveries": "1", "delivery_id": at(9)["delivery_id"], "listed": "true", "state": "PENDING", "attempts": "0", "attempt_budget": "20"}},
		{11, map[string]string{"delivery_id": at(9)["delivery_id"], "state": "PENDING", "status": "409", "code": "STATE_CONFLICT"}},
		{12, map[string]string{"revision": "3", "enabled": "true", "pending_count": "1"}},
		{13, map[string]string{"expected_revision": "3", "revision": "4", "enabled": "false", "deduplicated": "false"}},
		{14, map[string]string{"subscription_id": subID, "name": at(1)["name"], "enabled": "false", "revision": "4"}},
	}
	for _, e := range expect {
		for k, v := range e.kv {
			if got := at(e.line)[k]; got != v {
				t.Errorf("line %d (step=%s): %s=%q, want %q", e.line, lines[e.line].step, k, got, v)
			}
		}
	}
	if !strings.HasPrefix(at(1)["name"], "subscription-admin-") || len(subID) != 32 {
		t.Errorf("create line = %v", at(1))
	}

	// What the server kept: the subscription, paused, with the one
	// delivery still pending.
	client, err := orbit.NewClient(srv.URL, cred.Token, orbit.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.GetSubscription(ctx, subID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Enabled || s.Revision != 4 || s.PendingCount != 1 {
		t.Errorf("kept subscription = %+v; want paused at revision 4 with one pending delivery", s)
	}
}

// A credential without --event-access stops the example before it
// creates anything, with the configuration exit code (S-26).
func TestS26_ExampleWithoutEventAccessCreatesNothing(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{"tasks:submit", "tasks:read", "tasks:cancel"}})
	client, err := orbit.NewClient(srv.URL, cred.Token, orbit.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := report(&stderr, run(context.Background(), &stdout, client, cred.QueueID, "test"))
	if code != exitConfig || stdout.Len() != 0 {
		t.Fatalf("exit code %d, stdout %q; want %d and nothing printed", code, &stdout, exitConfig)
	}
	lines := parseLines(t, stderr.String())
	if len(lines) != 1 || lines[0].step != "credential" ||
		lines[0].kv["error"] != "the credential lacks events:manage,events:read; bootstrap one with --event-access" {
		t.Errorf("stderr = %q", &stderr)
	}
	var n int
	if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM subscriptions`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d subscriptions (%v); want none", n, err)
	}
}

// An API error is reported with its code, status and request id and exit
// code 1; a missing credentials file is exit code 2.
func TestS26_ExampleReportsFailures(t *testing.T) {
	t.Setenv(orbit.EnvCredentialsFile, filepath.Join(t.TempDir(), "missing.json"))
	var stdout, stderr bytes.Buffer
	if code := mainCode(context.Background(), &stdout, &stderr); code != exitConfig || !strings.HasPrefix(stderr.String(), "step=config error=") {
		t.Errorf("missing file: exit code %d, stderr %q; want %d and a config line", code, &stderr, exitConfig)
	}

	stderr.Reset()
	err := fail("pause", &orbit.APIError{Status: 409, Code: orbit.CodeStateConflict, Message: "expected_revision 1 does not match", RequestID: "r1"})
	if code := report(&stderr, err); code != exitFailed {
		t.Errorf("API error: exit code %d, want %d", code, exitFailed)
	}
	want := `step=pause error=STATE_CONFLICT status=409 request_id=r1 message="expected_revision 1 does not match"` + "\n"
	if stderr.String() != want {
		t.Errorf("stderr = %q\nwant     %q", &stderr, want)
	}
}
