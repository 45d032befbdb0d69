//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	sdk "github.com/orbitrun/orbit/sdk/go"
)

// The client commands are tested through the real orbit binary, built once
// for the package, against a real server (servertest) on a real database.
var (
	binMu  sync.Mutex
	binDir string
	binErr bool
	bin    string
)

// orbitBinary builds ./cmd/orbit once and returns its path.
func orbitBinary(t *testing.T) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if bin == "" && !binErr {
		dir, err := os.MkdirTemp("", "orbit-cli-test-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
		binErr = true // until Build returns
		bin = orbitproc.Build(t, dir, false)
		binErr = false
	}
	if bin == "" {
		t.Fatal("the orbit binary could not be built (see the first test that tried)")
	}
	return bin
}

func init() { afterTests = append(afterTests, removeBinary) }

// removeBinary deletes the built binary once every test has ended.
func removeBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// cliEnv is a server and a credentials file for it: a credential with
// every permission, granted on the queue "orders".
type cliEnv struct {
	srv      *servertest.Server
	cred     servertest.Credential
	credFile string
	dir      string
}

func newCLIEnv(t *testing.T, opts ...servertest.Option) *cliEnv {
	t.Helper()
	orbitBinary(t)
	srv := servertest.Start(t, opts...)
	cred := srv.Credential(t, servertest.CredentialParams{Queue: "orders", Permissions: auth.AllPermissions})
	dir := t.TempDir()
	e := &cliEnv{srv: srv, cred: cred, dir: dir}
	e.credFile = e.writeCredentials(t, "credentials.json", cred, "orders")
	return e
}

// writeCredentials writes a credentials file for c, as orbit admin
// bootstrap does, and returns its path.
func (e *cliEnv) writeCredentials(t *testing.T, name string, c servertest.Credential, queue string) string {
	t.Helper()
	body, err := json.Marshal(sdk.Credentials{
		URL: e.srv.URL, Token: c.Token, CredentialID: c.CredentialID,
		Namespace: c.Namespace, NamespaceID: c.NamespaceID, Queue: queue, QueueID: c.QueueID,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is what one run of the binary printed.
type result struct {
	stdout, stderr string
	err            error
}

// exec runs the binary in the env's directory with stdin and args,
// without any ORBIT_* variable of the developer's but those in env.
func execOrbit(t *testing.T, dir, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, orbitBinary(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{out.String(), errOut.String(), err}
}

// run runs a client command with the env's credentials file.
func (e *cliEnv) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return execOrbit(t, e.dir, stdin, nil, append(args, "--credentials", e.credFile)...)
}

// ok runs a client command that must succeed and returns its output.
func (e *cliEnv) ok(t *testing.T, args ...string) result {
	t.Helper()
	r := e.run(t, "", args...)
	if r.err != nil {
		t.Fatalf("orbit %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r
}

// okJSON runs a client command with -o json and decodes its output.
func (e *cliEnv) okJSON(t *testing.T, v any, args ...string) result {
	t.Helper()
	r := e.ok(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("orbit %s -o json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
	return r
}

// wantFail checks that r failed with one error line that contains want
// (the flag at fault, or an error code).
func wantFail(t *testing.T, r result, want string) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("succeeded, want an error naming %s; stdout: %s", want, r.stdout)
	}
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v, want status 1", r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "orbit: ") || !strings.Contains(last, want) {
		t.Errorf("error %q does not name %s", r.stderr, want)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "orbit: ") && !strings.HasPrefix(l, "idempotency key: ") && !strings.HasPrefix(l, "dry run: ") && !strings.HasSuffix(strings.TrimSpace(l), "[y/N]") {
			t.Errorf("stderr line %q is neither the error nor a note", l)
		}
	}
}

// keyOf returns the idempotency key a write printed on standard error.
func keyOf(t *testing.T, r result) string {
	t.Helper()
	for l := range strings.Lines(r.stderr) {
		if rest, ok := strings.CutPrefix(l, "idempotency key: "); ok {
			key, _, _ := strings.Cut(rest, " ")
			return key
		}
	}
	t.Fatalf("no idempotency key printed: %s", r.stderr)
	return ""
}

// hasRoute reports whether the server serves method on path: the
// endpoints of K-7, K-8, K-9 and K-11 come from another change, and their
// commands are tested once the server has them.
func (e *cliEnv) hasRoute(method, path string) bool {
	for _, r := range e.srv.Routes {
		if r.Path == path && slices.Contains(r.Methods, method) {
			return true
		}
	}
	return false
}

// tableRow returns the line of a table output that contains id.
func tableRow(t *testing.T, out, id string) []string {
	t.Helper()
	for l := range strings.Lines(out) {
		if strings.Contains(l, id) {
			return strings.Fields(l)
		}
	}
	t.Fatalf("no row with %s in:\n%s", id, out)
	return nil
}

type taskJSON struct {
	ID       string          `json:"id"`
	QueueID  string          `json:"queue_id"`
	State    string          `json:"state"`
	Revision string          `json:"revision"`
	Input    json.RawMessage `json:"input"`
	Result   json.RawMessage `json:"result"`
}

type taskReceipt struct {
	Task         taskJSON `json:"task"`
	Deduplicated bool     `json:"deduplicated"`
}

type subJSON struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	QueueID        string `json:"queue_id"`
	Revision       string `json:"revision"`
	Enabled        bool   `json:"enabled"`
	CursorSequence string `json:"cursor_sequence"`
	MaxAttempts    int    `json:"max_attempts"`
}

type subReceipt struct {
	Subscription subJSON `json:"subscription"`
	Deduplicated bool    `json:"deduplicated"`
}

type deliveryJSON struct {
	ID       string `json:"id"`
	Sequence string `json:"sequence"`
	State    string `json:"state"`
	Revision string `json:"revision"`
	Attempts int    `json:"attempts"`
}

type deliveryPage struct {
	Items      []deliveryJSON `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// compact returns raw JSON without insignificant space.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return buf.String()
}

// discardLogger drops the log of SDK workers and consumers in tests.
var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
