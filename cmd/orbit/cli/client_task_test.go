//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
	sdk "github.com/orbitrun/orbit/sdk/go"
)

// TestO7_QueueList: orbit queue list shows the queues the credential is
// granted, as a table and as the server's JSON.
func TestO7_QueueList(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	sc, err := admin.NewStore(e.srv.DB).ScopeEnsure(t.Context(), &admin.ScopeEnsureParams{Namespace: "ns", Application: "app", Environment: "env", Queue: "refunds"})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.NewStore(e.srv.DB).CredentialGrantQueues(t.Context(), e.cred.CredentialID, []string{sc.QueueID}); err != nil {
		t.Fatal(err)
	}
	e.srv.Credential(t, servertest.CredentialParams{Queue: "hidden", NoQueueGrant: true})

	r := e.ok(t, "queue", "list")
	if row := tableRow(t, r.stdout, e.cred.QueueID); row[1] != "orders" || row[2] != "ns" {
		t.Errorf("orders row %v", row)
	}
	if row := tableRow(t, r.stdout, sc.QueueID); row[1] != "refunds" {
		t.Errorf("refunds row %v", row)
	}
	if !strings.HasPrefix(r.stdout, "ID ") || strings.Contains(r.stdout, "hidden") {
		t.Errorf("table:\n%s", r.stdout)
	}

	var page struct {
		Items []struct{ ID, Name string } `json:"items"`
	}
	e.okJSON(t, &page, "queue", "list")
	if len(page.Items) != 2 || page.Items[0].Name != "refunds" || page.Items[1].Name != "orders" {
		t.Errorf("json items %+v", page.Items)
	}
	r = e.ok(t, "queue", "list", "--limit", "1")
	if !strings.Contains(r.stderr, "more: repeat with --cursor ") {
		t.Errorf("a first page of one says nothing of the next: %q", r.stderr)
	}
	cursor := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.stderr), "more: repeat with --cursor "))
	r = e.ok(t, "queue", "list", "--limit", "1", "--cursor", cursor)
	tableRow(t, r.stdout, e.cred.QueueID)

	t.Run("BadInput", func(t *testing.T) {
		wantFail(t, e.run(t, "", "queue", "list", "-o", "yaml"), "-o/--output")
		wantFail(t, e.run(t, "", "queue", "list", "--limit", "500"), "--limit")
		wantFail(t, e.run(t, "", "queue", "list", "--server", "ftp://x"), "--server")
		wantFail(t, execOrbit(t, e.dir, "", nil, "queue", "list"), "--credentials")
		wantFail(t, execOrbit(t, e.dir, "", nil, "queue", "list", "--credentials", filepath.Join(e.dir, "missing.json")), "--credentials")
		wantFail(t, e.run(t, "", "queue", "list", "--cursor", "bogus"), "INVALID_ARGUMENT")
	})
	t.Run("Environment", func(t *testing.T) {
		// ORBIT_CREDENTIALS_FILE names the file; ORBIT_URL overrides its url.
		r := execOrbit(t, e.dir, "", []string{"ORBIT_CREDENTIALS_FILE=" + e.credFile}, "queue", "list")
		if r.err != nil || !strings.Contains(r.stdout, "orders") {
			t.Errorf("with ORBIT_CREDENTIALS_FILE: %v %s %s", r.err, r.stdout, r.stderr)
		}
		r = execOrbit(t, e.dir, "", []string{"ORBIT_CREDENTIALS_FILE=" + e.credFile, "ORBIT_URL=http://127.0.0.1:1"}, "queue", "list")
		if r.err == nil {
			t.Error("ORBIT_URL did not override the file's url")
		}
		// orbit dev's file is found in .local of the working directory.
		if err := os.Mkdir(filepath.Join(e.dir, ".local"), 0o700); err != nil {
			t.Fatal(err)
		}
		body, _ := os.ReadFile(e.credFile)
		if err := os.WriteFile(filepath.Join(e.dir, ".local", "dev.credentials.json"), body, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := execOrbit(t, e.dir, "", nil, "queue", "list"); r.err != nil || !strings.Contains(r.stdout, "orders") {
			t.Errorf("with .local/dev.credentials.json: %v %s", r.err, r.stderr)
		}
	})
	if strings.Contains(r.stdout+r.stderr, e.cred.Token) {
		t.Error("a command printed the token")
	}
}

// TestO7_TaskCommands: submit, get, list, cancel and wait, through the
// binary; submit's idempotency key is printed and reusable.
func TestO7_TaskCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)

	var rec taskReceipt
	r := e.okJSON(t, &rec, "task", "submit", "--queue", "orders", "--input", `{"order": 12345678901234567890}`, "--idempotent", "--max-attempts", "5")
	if rec.Task.State != "PENDING" || rec.Task.QueueID != e.cred.QueueID || rec.Deduplicated {
		t.Fatalf("submit: %+v", rec)
	}
	key := keyOf(t, r)
	var again taskReceipt
	e.okJSON(t, &again, "task", "submit", "--queue", "orders", "--input", `{"order": 12345678901234567890}`, "--idempotent", "--max-attempts", "5", "--idempotency-key", key)
	if again.Task.ID != rec.Task.ID || !again.Deduplicated {
		t.Errorf("a submit repeated with its key made %+v, want the original task deduplicated", again)
	}
	// A queue by id, and the credentials file's queue by default.
	var byID, byDefault taskReceipt
	e.okJSON(t, &byID, "task", "submit", "--queue", e.cred.QueueID, "--input", `1`)
	e.okJSON(t, &byDefault, "task", "submit", "--input", `"x"`)
	if byID.Task.QueueID != e.cred.QueueID || byDefault.Task.QueueID != e.cred.QueueID {
		t.Errorf("queue by id %s, by default %s", byID.Task.QueueID, byDefault.Task.QueueID)
	}
	inputFile := filepath.Join(e.dir, "input.json")
	os.WriteFile(inputFile, []byte(`{"from": "file"}`), 0o600)
	r = e.ok(t, "task", "submit", "--input-file", inputFile)
	if !strings.Contains(r.stdout, "task.state:") || !strings.Contains(r.stdout, "deduplicated:") {
		t.Errorf("submit table:\n%s", r.stdout)
	}

	var got taskJSON
	e.okJSON(t, &got, "task", "get", rec.Task.ID)
	if got.ID != rec.Task.ID || compact(t, got.Input) != `{"order":12345678901234567890}` {
		t.Errorf("get: %+v (input %s)", got, got.Input)
	}
	r = e.ok(t, "task", "get", rec.Task.ID)
	if !strings.Contains(r.stdout, "12345678901234567890") || !strings.Contains(r.stdout, "state:") {
		t.Errorf("get table:\n%s", r.stdout)
	}

	r = e.ok(t, "task", "list", "--queue", "orders")
	if row := tableRow(t, r.stdout, rec.Task.ID); row[1] != "PENDING" {
		t.Errorf("list row %v", row)
	}
	var page struct{ Items []taskJSON }
	e.okJSON(t, &page, "task", "list", "--state", "PENDING", "--limit", "2")
	if len(page.Items) != 2 {
		t.Errorf("list --limit 2: %d items", len(page.Items))
	}

	var cancelled taskReceipt
	r = e.okJSON(t, &cancelled, "task", "cancel", rec.Task.ID, "--reason", "not needed")
	if cancelled.Task.State != "CANCELLED" {
		t.Errorf("cancel: %+v", cancelled)
	}
	keyOf(t, r)
	wantFail(t, e.run(t, "", "task", "cancel", rec.Task.ID), "STATE_CONFLICT")

	var waited taskJSON
	e.okJSON(t, &waited, "task", "wait", rec.Task.ID)
	if waited.State != "CANCELLED" {
		t.Errorf("wait on a cancelled task: %+v", waited)
	}
	wantFail(t, e.run(t, "", "task", "wait", byID.Task.ID, "--timeout", "300ms", "--interval", "50ms"), "--timeout")

	t.Run("BadInput", func(t *testing.T) {
		wantFail(t, e.run(t, "", "task", "submit"), "--input")
		wantFail(t, e.run(t, "", "task", "submit", "--input", "{nope"), "--input")
		wantFail(t, e.run(t, "", "task", "submit", "--input", "1", "--input-file", inputFile), "--input")
		wantFail(t, e.run(t, "", "task", "submit", "--input", "1", "--max-attempts", "101"), "--max-attempts")
		wantFail(t, e.run(t, "", "task", "submit", "--input", "1", "--queue", "nosuch"), "--queue")
		wantFail(t, e.run(t, "", "task", "submit", "--input", "1", "--idempotency-key", "bad key"), "--idempotency-key")
		wantFail(t, e.run(t, "", "task", "get", "123"), "TASK_ID")
		wantFail(t, e.run(t, "", "task", "get", strings.Repeat("a", 32)), "NOT_FOUND")
		wantFail(t, e.run(t, "", "task", "list", "--state", "DONE"), "--state")
		wantFail(t, e.run(t, "", "task", "review", rec.Task.ID, "--resolution", "maybe", "--reason", "x"), "--resolution")
		wantFail(t, e.run(t, "", "task", "review", rec.Task.ID, "--resolution", "failed"), "--reason")
		wantFail(t, e.run(t, "", "task", "review", rec.Task.ID, "--resolution", "requeue", "--reason", "x", "--result", "1"), "--result")
		wantFail(t, e.run(t, "", "task", "wait", rec.Task.ID, "--interval", "1ms"), "--interval")
	})
}

// TestO7_TaskReview: orbit task review reads the task's revision itself,
// settles a NEEDS_REVIEW task, and fails cleanly on a stale revision.
func TestO7_TaskReview(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	var rec taskReceipt
	e.okJSON(t, &rec, "task", "submit", "--input", `{"charge": 10}`)

	// A worker reports needs_review.
	ctx, cancel := context.WithCancel(t.Context())
	worker, err := sdk.NewWorker(sdk.WorkerConfig{BaseURL: e.srv.URL, Token: e.cred.Token, QueueID: e.cred.QueueID, Capacity: 1, Logger: discardLogger},
		func(context.Context, *sdk.AssignedTask) sdk.Outcome {
			return sdk.NeedsReview(json.RawMessage(`{"charged": "unknown"}`))
		})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx) }()
	var waited taskJSON
	e.okJSON(t, &waited, "task", "wait", rec.Task.ID, "--timeout", "30s", "--interval", "50ms")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
	if waited.State != "NEEDS_REVIEW" {
		t.Fatalf("wait: %+v", waited)
	}

	stale := e.run(t, "", "task", "review", rec.Task.ID, "--resolution", "failed", "--reason", "x", "--expected-revision", "1")
	wantFail(t, stale, "STATE_CONFLICT")
	if !strings.Contains(stale.stderr, "changed since this command read it") {
		t.Errorf("a stale review does not say what happened: %s", stale.stderr)
	}

	var reviewed taskReceipt
	r := e.okJSON(t, &reviewed, "task", "review", rec.Task.ID, "--resolution", "succeeded", "--reason", "the bank confirmed", "--result", `{"charged": true}`)
	if reviewed.Task.State != "SUCCEEDED" || compact(t, reviewed.Task.Result) != `{"charged":true}` {
		t.Errorf("review: %+v %s", reviewed, reviewed.Task.Result)
	}
	if !strings.Contains(r.stderr, "--expected-revision "+waited.Revision) {
		t.Errorf("review does not print the revision to repeat it with: %s", r.stderr)
	}
	// Repeating with the printed key and revision returns the receipt.
	var again taskReceipt
	e.okJSON(t, &again, "task", "review", rec.Task.ID, "--resolution", "succeeded", "--reason", "the bank confirmed", "--result", `{"charged": true}`,
		"--idempotency-key", keyOf(t, r), "--expected-revision", waited.Revision)
	if !again.Deduplicated || again.Task.State != "SUCCEEDED" {
		t.Errorf("repeated review: %+v", again)
	}
}

// TestO7_ClientHelp: every client command says what it does, with an
// example.
func TestO7_ClientHelp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"queue", "list"},
		{"task", "submit"}, {"task", "get"}, {"task", "list"}, {"task", "cancel"}, {"task", "review"}, {"task", "wait"},
		{"sub", "create"}, {"sub", "list"}, {"sub", "get"}, {"sub", "pause"}, {"sub", "resume"}, {"sub", "delete"},
		{"sub", "deliveries"}, {"sub", "retry"}, {"sub", "replay"}, {"sub", "skip"},
		{"events", "tail"},
		{"admin", "credential", "list"},
	} {
		r := execOrbit(t, dir, "", nil, append(args, "--help")...)
		if r.err != nil {
			t.Errorf("%v --help: %v", args, r.err)
			continue
		}
		if !strings.Contains(r.stdout, "Example") || !strings.Contains(r.stdout, "orbit "+strings.Join(args, " ")) {
			t.Errorf("orbit %s --help has no example:\n%s", strings.Join(args, " "), r.stdout)
		}
		if !strings.Contains(r.stdout, "-o, --output") {
			t.Errorf("orbit %s --help has no -o/--output", strings.Join(args, " "))
		}
	}
}
