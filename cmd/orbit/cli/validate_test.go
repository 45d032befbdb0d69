//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
)

// orbit validate, run as the binary, reports every problem on its own line
// with the file and the line of the key, names the file once per line and
// quotes bad values whole: unknown keys, values that do not decode, core
// and module section checks, a listen address that does not parse and a
// DSN without a database.
func TestValidate_EveryProblemHasItsLine(t *testing.T) {
	t.Parallel()
	bin := orbitproc.Build(t, t.TempDir(), false)
	dir := t.TempDir()
	path := filepath.Join(dir, "orbit.yaml")
	text := strings.Join([]string{
		"server:",                               // 1
		"  listen: nope",                        // 2
		"  request_deadline: \"eight seconds\"", // 3
		"  max_connections: lots",               // 4
		"database:",                             // 5
		"  dsn: \"u:secret@tcp(db:3306)/\"",     // 6
		"log:",                                  // 7
		"  level: loud",                         // 8
		"tasks:",                                // 9
		"  retention: 0s",                       // 10
		"bogus: 1",                              // 11
	}, "\n") + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "validate", "--config", path)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted:\n%s", out)
	}
	want := map[string]bool{
		"orbit: " + path + `:2: server.listen: must be host:port, such as 127.0.0.1:8080 or :8080, got "nope"`:               true,
		"orbit: " + path + `:3: server.request_deadline: must be a duration such as 8s, 1m30s or 250ms, got "eight seconds"`: true,
		"orbit: " + path + `:4: server.max_connections: must be int, got "lots"`:                                             true,
		"orbit: " + path + `:6: database.dsn: must name the database, as in user:password@tcp(host:3306)/orbit`:              true,
		"orbit: " + path + `:8: log.level: must be debug, info, warn or error, got "loud"`:                                   true,
		"orbit: " + path + `:10: tasks.retention: must be positive, got 0s`:                                                  true,
		"orbit: " + path + `:11: unknown key "bogus"`:                                                                        true,
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		if !want[line] {
			t.Errorf("unexpected line %q", line)
		}
		delete(want, line)
		if strings.Count(line, path) != 1 {
			t.Errorf("line %q names the file %d times", line, strings.Count(line, path))
		}
	}
	for line := range want {
		t.Errorf("missing line %q", line)
	}
	if strings.Contains(string(out), "secret") {
		t.Errorf("validate printed the password:\n%s", out)
	}
}
