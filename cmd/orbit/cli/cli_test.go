package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/orbitrun/orbit/cmd/orbit/cli"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
)

func TestMain(m *testing.M) {
	// The commands read ORBIT_* variables; a developer's own settings (a
	// database DSN above all) must not reach the tests.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, config.EnvPrefix) && name != testdb.EnvDSN {
			os.Unsetenv(name)
		}
	}
	code := testdb.Run(m)
	for _, f := range afterTests {
		f()
	}
	os.Exit(testdb.CheckLeaks(code))
}

// afterTests run once every test has ended.
var afterTests []func()

// orbit runs the root command with args and returns what it printed on
// standard output.
func orbit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return orbitContext(context.Background(), args, io.Discard)
}

func orbitContext(ctx context.Context, args []string, stdout io.Writer) (string, error) {
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(io.MultiWriter(&out, stdout))
	root.SetErr(io.Discard)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// setup writes a config file naming the database of dsn and returns its
// path and a pool on the same database.
func setup(t *testing.T, dsn string) (configPath string, pool *sql.DB) {
	t.Helper()
	configPath = filepath.Join(t.TempDir(), "orbit.yaml")
	if err := os.WriteFile(configPath, fmt.Appendf(nil, "database:\n  dsn: %q\n", dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := db.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return configPath, pool
}

// privateDir returns a new directory only the current user can enter.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// migrationNames returns the recorded names of the binary's migration files,
// in order, and the module of each.
func migrationNames(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	files, err := migrate.Load(modules.Migrations())
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	var names []string
	owners := map[string]string{}
	for _, f := range files {
		names = append(names, f.Name)
		owners[f.Name] = f.Module
	}
	return names, owners
}

// statusStates parses `orbit migrate status` into file name -> state, and
// checks that each line names the module that owns the file.
func statusStates(t *testing.T, out string) map[string]string {
	t.Helper()
	_, owners := migrationNames(t)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !slices.Equal(strings.Fields(lines[0]), []string{"VERSION", "MODULE", "NAME", "STATE", "APPLIED_AT"}) {
		t.Fatalf("migrate status: unexpected header in\n%s", out)
	}
	states := map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("migrate status: malformed line %q", line)
		}
		if want := owners[f[2]]; f[1] != want && !(want == "" && f[1] == "platform") {
			t.Errorf("migrate status: %s belongs to %q, want %q", f[2], f[1], want)
		}
		states[f[2]] = f[3]
		if f[3] == "applied" {
			if _, err := time.Parse(time.RFC3339, f[4]); err != nil {
				t.Errorf("migrate status: applied_at of %s: %v", f[2], err)
			}
		}
	}
	return states
}

func TestMigrateUpAndStatus(t *testing.T) {
	t.Parallel()
	cfg, _ := setup(t, testdb.NewEmpty(t))
	names, _ := migrationNames(t)

	out, err := orbit(t, "migrate", "status", "--config", cfg)
	if err != nil {
		t.Fatalf("migrate status on an empty database: %v", err)
	}
	for _, name := range names {
		if got := statusStates(t, out)[name]; got != "pending" {
			t.Errorf("before up: %s is %q, want pending", name, got)
		}
	}

	out, err = orbit(t, "migrate", "up", "--config", cfg)
	if err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	var want []string
	for _, name := range names {
		want = append(want, "applied "+name)
	}
	if got := strings.Split(strings.TrimSpace(out), "\n"); !slices.Equal(got, want) {
		t.Fatalf("migrate up printed %q, want %q", got, want)
	}

	out, err = orbit(t, "migrate", "status", "--config", cfg)
	if err != nil {
		t.Fatalf("migrate status: %v", err)
	}
	states := statusStates(t, out)
	if len(states) != len(names) {
		t.Errorf("migrate status lists %d migrations, want %d:\n%s", len(states), len(names), out)
	}
	for _, name := range names {
		if states[name] != "applied" {
			t.Errorf("after up: %s is %q, want applied", name, states[name])
		}
	}

	out, err = orbit(t, "migrate", "up", "--config", cfg)
	if err != nil || strings.TrimSpace(out) != "schema is up to date" {
		t.Fatalf("second migrate up: %q, %v", out, err)
	}
}

// credentialsFileKeys are the members of a credentials file, and no others.
var credentialsFileKeys = []string{
	"application", "application_id", "credential_id", "environment", "environment_id",
	"namespace", "namespace_id", "permissions", "queue", "queue_id", "token", "url",
}

// credentialsFile is a decoded credentials file.
type credentialsFile struct {
	URL           string   `json:"url"`
	Token         string   `json:"token"`
	CredentialID  string   `json:"credential_id"`
	Namespace     string   `json:"namespace"`
	NamespaceID   string   `json:"namespace_id"`
	Application   string   `json:"application"`
	ApplicationID string   `json:"application_id"`
	Environment   string   `json:"environment"`
	EnvironmentID string   `json:"environment_id"`
	Queue         string   `json:"queue"`
	QueueID       string   `json:"queue_id"`
	Permissions   []string `json:"permissions"`
}

// readCredentialsFile checks the mode and the exact members of a credentials
// file and decodes it.
func readCredentialsFile(t *testing.T, path string) credentialsFile {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("%s has mode %o, want 600", path, mode)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, credentialsFileKeys) {
		t.Errorf("%s has keys %v, want %v", path, keys, credentialsFileKeys)
	}
	var f credentialsFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// bootstrap runs `orbit admin bootstrap` for the given names into a new file
// in a private directory and returns the decoded file.
func bootstrap(t *testing.T, cfg, namespace, queue string, flags ...string) credentialsFile {
	t.Helper()
	out := filepath.Join(privateDir(t), "credentials.json")
	args := append([]string{"admin", "bootstrap", "--config", cfg,
		"--namespace", namespace, "--application", "app", "--environment", "dev", "--queue", queue,
		"--output", out}, flags...)
	stdout, err := orbit(t, args...)
	if err != nil {
		t.Fatalf("orbit %s: %v", strings.Join(args, " "), err)
	}
	f := readCredentialsFile(t, out)
	if !strings.Contains(stdout, "credential_id="+f.CredentialID) || strings.Contains(stdout, f.Token) {
		t.Errorf("bootstrap printed %q: want the credential id and never the token", stdout)
	}
	return f
}

func countCredentials(t *testing.T, pool *sql.DB) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(`SELECT COUNT(*) FROM credentials`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAdminBootstrap(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewDSN(t))
	base := []string{auth.PermTasksCancel, auth.PermTasksRead, auth.PermTasksSubmit}
	tests := []struct {
		name  string
		flags []string
		want  []string
	}{
		{name: "Default", want: base},
		{name: "EventAccess", flags: []string{"--event-access"}, want: append(slices.Clone(base), auth.PermEventsConsume, auth.PermEventsManage, auth.PermEventsRead)},
		{name: "WorkerAccess", flags: []string{"--worker-access"}, want: append(slices.Clone(base), auth.PermTasksWork)},
		{name: "ReviewAccess", flags: []string{"--review-access"}, want: append(slices.Clone(base), auth.PermTasksReview)},
		{name: "Everything", flags: []string{"--event-access", "--worker-access", "--review-access"}, want: auth.AllPermissions},
		{name: "URL", flags: []string{"--url", "https://orbit.example.com"}, want: base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			namespace := "ns-" + strings.ToLower(tt.name)
			f := bootstrap(t, cfg, namespace, "jobs", tt.flags...)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(f.Permissions, want) {
				t.Errorf("file permissions = %v, want %v", f.Permissions, want)
			}
			wantURL := "http://" + config.DefaultListen
			if tt.name == "URL" {
				wantURL = "https://orbit.example.com"
			}
			if f.URL != wantURL {
				t.Errorf("url = %q, want %q", f.URL, wantURL)
			}
			if f.Namespace != namespace || f.Application != "app" || f.Environment != "dev" || f.Queue != "jobs" {
				t.Errorf("names = %s/%s/%s/%s", f.Namespace, f.Application, f.Environment, f.Queue)
			}
			for _, id := range []string{f.CredentialID, f.NamespaceID, f.ApplicationID, f.EnvironmentID, f.QueueID} {
				if !httpx.ValidID(id) {
					t.Errorf("id %q is not 32 lowercase hex characters", id)
				}
			}

			p, err := admin.NewStore(pool).Authenticate(context.Background(), "Bearer "+f.Token)
			if err != nil {
				t.Fatalf("the token of the file does not authenticate: %v", err)
			}
			if p.CredentialID != f.CredentialID || p.NamespaceID != f.NamespaceID ||
				p.ApplicationID != f.ApplicationID || p.EnvironmentID != f.EnvironmentID {
				t.Errorf("principal %+v does not match the file", p)
			}
			if got := p.SortedPermissions(); !slices.Equal(got, want) {
				t.Errorf("stored permissions = %v, want %v", got, want)
			}
			if got := p.SortedQueues(); !slices.Equal(got, []string{f.QueueID}) {
				t.Errorf("queue grants = %v, want only %s", got, f.QueueID)
			}
		})
	}
}

func TestAdminBootstrapRerunReusesScope(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewDSN(t))
	first := bootstrap(t, cfg, "shop", "orders")
	second := bootstrap(t, cfg, "shop", "orders")
	if first.QueueID != second.QueueID || first.NamespaceID != second.NamespaceID ||
		first.ApplicationID != second.ApplicationID || first.EnvironmentID != second.EnvironmentID {
		t.Errorf("re-run made new objects: %+v then %+v", first, second)
	}
	if first.CredentialID == second.CredentialID || first.Token == second.Token {
		t.Error("re-run did not issue a new credential")
	}
	a := admin.NewStore(pool)
	for _, f := range []credentialsFile{first, second} {
		if _, err := a.Authenticate(context.Background(), "Bearer "+f.Token); err != nil {
			t.Errorf("credential %s: %v", f.CredentialID, err)
		}
	}
	other := bootstrap(t, cfg, "shop", "refunds")
	if other.QueueID == first.QueueID || other.NamespaceID != first.NamespaceID {
		t.Errorf("another queue in the same namespace: %+v", other)
	}
}

func TestAdminBootstrapRefusesUnsafeOutput(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewDSN(t))
	args := func(output string) []string {
		return []string{"admin", "bootstrap", "--config", cfg, "--namespace", "ns", "--application", "app",
			"--environment", "dev", "--queue", "q", "--output", output}
	}

	t.Run("ExistingFile", func(t *testing.T) {
		path := filepath.Join(privateDir(t), "credentials.json")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		before := countCredentials(t, pool)
		_, err := orbit(t, args(path)...)
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("bootstrap over an existing file: %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep me" {
			t.Errorf("the existing file was changed to %q", b)
		}
		if after := countCredentials(t, pool); after != before {
			t.Errorf("a refused bootstrap created %d credentials", after-before)
		}
	})

	t.Run("DirectoryOthersCanRead", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "credentials.json")
		before := countCredentials(t, pool)
		_, err := orbit(t, args(path)...)
		if err == nil || !strings.Contains(err.Error(), "accessible to other users") {
			t.Fatalf("bootstrap into a 0755 directory: %v", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the credentials file was written: %v", err)
		}
		if after := countCredentials(t, pool); after != before {
			t.Errorf("a refused bootstrap created %d credentials", after-before)
		}
	})
}

func TestAdminBootstrapReportsEveryInvalidFlag(t *testing.T) {
	t.Parallel()
	_, err := orbit(t, "admin", "bootstrap", "--namespace", "-bad", "--application", "a b",
		"--environment", "dev")
	if err == nil {
		t.Fatal("bootstrap with invalid flags succeeded")
	}
	for _, want := range []string{"--namespace", "--application", "--queue", "--output"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "--environment") {
		t.Errorf("error %q names the valid --environment", err)
	}
}

func TestAdminCredentialRevoke(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewDSN(t))
	f := bootstrap(t, cfg, "ns", "q")
	a := admin.NewStore(pool)
	if _, err := a.Authenticate(context.Background(), "Bearer "+f.Token); err != nil {
		t.Fatalf("before revoke: %v", err)
	}

	out, err := orbit(t, "admin", "credential", "revoke", f.CredentialID, "--reason", "leaked", "--config", cfg)
	if err != nil || !strings.Contains(out, "revoked=true") {
		t.Fatalf("revoke: %q, %v", out, err)
	}
	if _, err := a.Authenticate(context.Background(), "Bearer "+f.Token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after revoke: Authenticate = %v, want ErrUnauthenticated", err)
	}

	out, err = orbit(t, "admin", "credential", "list", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, f.CredentialID) {
			line = l
		}
	}
	if !strings.Contains(line, "revoked") {
		t.Errorf("credential list does not show %s as revoked:\n%s", f.CredentialID, out)
	}
	if strings.Contains(out, f.Token) {
		t.Error("credential list printed a token")
	}

	if _, err := orbit(t, "admin", "credential", "revoke", "not-an-id", "--config", cfg); err == nil {
		t.Error("revoke of a malformed id succeeded")
	}
	if _, err := orbit(t, "admin", "credential", "revoke", db.NewID(), "--config", cfg); err == nil {
		t.Error("revoke of an unknown credential succeeded")
	}
}

func TestAdminCommandsRefuseSchemaBehind(t *testing.T) {
	t.Parallel()
	cfg, _ := setup(t, testdb.NewEmpty(t))
	out := filepath.Join(privateDir(t), "credentials.json")
	_, err := orbit(t, "admin", "bootstrap", "--config", cfg, "--namespace", "ns", "--application", "app",
		"--environment", "dev", "--queue", "q", "--output", out)
	if err == nil || !strings.Contains(err.Error(), "orbit migrate up") {
		t.Fatalf("bootstrap on an empty database: %v, want a hint to run orbit migrate up", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a credentials file was written: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()

	t.Run("ReportsEveryError", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "orbit.yaml")
		text := "server:\n  listne: 127.0.0.1:1\n  request_deadline: soon\nbogus: 1\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := orbit(t, "validate", "--config", path)
		if err == nil {
			t.Fatal("validate accepted a file with errors")
		}
		lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
		wants := []string{
			path + `:2: unknown key "server.listne"`,
			path + `:4: unknown key "bogus"`,
			"server.request_deadline",
		}
		if len(lines) != len(wants) {
			t.Errorf("validate reported %d lines, want one per error (%d):\n%s", len(lines), len(wants), err)
		}
		for _, want := range wants {
			found := false
			for _, line := range lines {
				found = found || strings.Contains(line, want)
			}
			if !found {
				t.Errorf("no line of\n%s\ncontains %q", err, want)
			}
		}
	})

	t.Run("ExampleFile", func(t *testing.T) {
		t.Parallel()
		const example = "../../../orbit.example.yaml"
		out, err := orbit(t, "validate", "--config", example)
		if err != nil {
			t.Fatalf("validate %s: %v", example, err)
		}
		if !strings.Contains(out, "is valid") {
			t.Errorf("validate printed %q", out)
		}
		raw, err := os.ReadFile(example)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		mentioned := map[string]bool{}
		collectKeys(doc.Content[0], "", mentioned)
		for _, key := range config.Keys(config.Default(), modules.NewInstances().Sections()) {
			if !mentioned[key] {
				t.Errorf("%s does not mention %s", example, key)
			}
		}

		// The values it shows are the defaults.
		core, sections := config.Default(), modules.NewInstances().Sections()
		noEnv := func(string) (string, bool) { return "", false }
		if _, err := config.Load(config.Source{File: example, LookupEnv: noEnv}, core, sections); err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprintf("%+v", *core), fmt.Sprintf("%+v", *config.Default()); got != want {
			t.Errorf("%s core values:\n got  %s\n want %s", example, got, want)
		}
		for id, def := range modules.NewInstances().Sections() {
			if got, want := fmt.Sprintf("%+v", sections[id]), fmt.Sprintf("%+v", def); got != want {
				t.Errorf("%s section %s:\n got  %s\n want %s", example, id, got, want)
			}
		}
	})
}

// collectKeys adds the dotted path of every leaf of a YAML mapping to keys.
func collectKeys(node *yaml.Node, prefix string, keys map[string]bool) {
	for i := 0; i+1 < len(node.Content); i += 2 {
		key := node.Content[i].Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if v := node.Content[i+1]; v.Kind == yaml.MappingNode {
			collectKeys(v, key, keys)
		} else {
			keys[key] = true
		}
	}
}

func TestServeRefusesSchemaBehind(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewEmpty(t))
	_, err := orbit(t, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	if err == nil {
		t.Fatal("serve started on an empty database")
	}
	for _, want := range []string{"migrate up", "--migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("serve error %q does not mention %q", err, want)
		}
	}
	var tables int
	if err := pool.QueryRow(`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("serve without --migrate created %d tables", tables)
	}
}

// listenWatcher collects what serve prints and reports the address after
// "orbit listening on " once.
type listenWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
	sent bool
}

func (w *listenWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	const prefix = "orbit listening on "
	if s := w.buf.String(); !w.sent && strings.Contains(s, prefix) {
		rest := s[strings.Index(s, prefix)+len(prefix):]
		if addr, _, ok := strings.Cut(rest, "\n"); ok {
			w.sent = true
			w.addr <- addr
		}
	}
	return len(p), nil
}

func TestServeMigratesServesAndStops(t *testing.T) {
	t.Parallel()
	cfg, _ := setup(t, testdb.NewEmpty(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &listenWatcher{addr: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		_, err := orbitContext(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--migrate"}, w)
		done <- err
	}()

	var addr string
	select {
	case addr = <-w.addr:
	case err := <-done:
		t.Fatalf("serve returned before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not report its address within 30s")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d %s", path, resp.StatusCode, body)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of its context ending")
	}
}

func TestModulesCommand(t *testing.T) {
	t.Parallel()
	out, err := orbit(t, "modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range modules.Registered() {
		found := false
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) == 3 && f[0] == info.ID {
				found = true
				if roles := strings.Join(info.Roles, ","); roles != "" && f[2] != roles {
					t.Errorf("module %s listed with roles %s, want %s", info.ID, f[2], roles)
				}
			}
		}
		if !found {
			t.Errorf("orbit modules does not list %s:\n%s", info.ID, out)
		}
	}
	if _, ok := modules.Lookup("admin"); !ok {
		t.Error("the admin module is not part of the binary")
	}
}

func TestValidate_MalformedDSN(t *testing.T) {
	t.Parallel()
	const password = "Pa55w0rdNeverShown"
	tests := []struct {
		name, dsn, want string
	}{
		{"UnterminatedAddress", "orbit:" + password + "@tcp(127.0.0.1:3306/orbit", "not a valid go-sql-driver/mysql DSN"},
		{"NoSlash", "orbit:" + password + "@tcp(127.0.0.1:3306)", "not a valid go-sql-driver/mysql DSN"},
		{"BadParameter", "orbit:" + password + "@tcp(127.0.0.1:3306)/orbit?parseTime=" + password, "not a valid go-sql-driver/mysql DSN"},
		{"NoDatabase", "orbit:" + password + "@tcp(127.0.0.1:3306)/", "must name the database"},
		{"NoDatabaseWithParameters", "orbit:" + password + "@tcp(127.0.0.1:3306)/?parseTime=true", "must name the database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "orbit.yaml")
			text := fmt.Sprintf("log:\n  level: info\ndatabase:\n  migrate: false\n  dsn: %q\n", tt.dsn)
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := orbit(t, "validate", "--config", path)
			if err == nil {
				t.Fatalf("validate accepted dsn %q", tt.dsn)
			}
			if want := path + ":5: database.dsn: "; !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("validate = %q, want %q…%q", err, want, tt.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("validate printed the password: %q", err)
			}
		})
	}
	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "orbit.yaml")
		if err := os.WriteFile(path, []byte("database:\n  dsn: \"orbit:"+password+"@tcp(127.0.0.1:3306)/orbit?parseTime=true\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := orbit(t, "validate", "--config", path); err != nil {
			t.Fatalf("validate refused a valid DSN: %v", err)
		}
	})
}

// A command reaches the database through database.failover_dsns when
// database.dsn has no server.
func TestN8_CommandsUseFailoverDSNs(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("orbit:pw@tcp(%s)/orbit", l.Addr())
	l.Close()
	path := filepath.Join(t.TempDir(), "orbit.yaml")
	text := fmt.Sprintf("database:\n  dsn: %q\n  failover_dsns:\n    - %q\n", down, testdb.NewDSN(t))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := orbit(t, "migrate", "status", "--config", path)
	if err != nil {
		t.Fatalf("migrate status: %v", err)
	}
	for name, state := range statusStates(t, out) {
		if state != "applied" {
			t.Errorf("%s is %s, want applied", name, state)
		}
	}
}
