//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeBuild runs `make build` in the repository root into dir with the
// given PATH and returns what the binary's `orbit version` prints.
func makeBuild(t *testing.T, dir, path string) string {
	t.Helper()
	bin := filepath.Join(dir, "orbit")
	cmd := exec.Command("make", "build", "BIN="+bin)
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("orbit version: %v", err)
	}
	return string(out)
}

func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Skipf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// `make build` stamps `git describe --tags --always --dirty` and the full
// commit into the binary, and orbit version prints them.
func TestVersion_MakeBuildStampsVersionAndRevision(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	describe := gitOutput(t, "describe", "--tags", "--always", "--dirty")
	head := gitOutput(t, "rev-parse", "HEAD")
	out := makeBuild(t, t.TempDir(), os.Getenv("PATH"))
	if want := "orbit " + describe + " revision " + head + " "; !strings.HasPrefix(out, want) {
		t.Errorf("orbit version printed %q, want it to start with %q", out, want)
	}
}

// Without git on PATH, `make build` still builds, and orbit version falls
// back cleanly.
func TestVersion_MakeBuildWithoutGit(t *testing.T) {
	t.Parallel()
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	goPath, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	for name, target := range map[string]string{"make": makePath, "go": goPath} {
		if err := os.Symlink(target, filepath.Join(binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	out := makeBuild(t, t.TempDir(), binDir)
	if !strings.HasPrefix(out, "orbit (devel) revision unknown ") {
		t.Errorf("orbit version without git printed %q", out)
	}
}
