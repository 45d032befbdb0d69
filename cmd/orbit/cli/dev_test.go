//go:build linux

package cli_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
)

// devTimeout bounds one `orbit dev` run: initialising a data directory
// takes a few seconds, migrating a few more.
const devTimeout = 2 * time.Minute

// devProcess is a running `orbit dev` with its combined output.
type devProcess struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDev runs `bin dev` in dir with none of the caller's ORBIT_*
// settings, so that it starts its own local database.
func startDev(t *testing.T, bin, dir string, args ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &devProcess{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// SIGTERM lets orbit dev stop its database.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(devTimeout):
				_ = cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("orbit dev output:\n%s", p.out)
		}
	})
	return p
}

// waitFor waits until the output holds s or the process exits.
func (p *devProcess) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(devTimeout)
	for !strings.Contains(p.out.String(), s) {
		select {
		case <-p.done:
			t.Fatalf("orbit dev exited (%v) before printing %q:\n%s", p.err, s, p.out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("orbit dev did not print %q within %s:\n%s", s, devTimeout, p.out)
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("orbit dev exited with %v after SIGTERM:\n%s", p.err, p.out)
		}
	case <-time.After(devTimeout):
		t.Fatalf("orbit dev did not stop within %s", devTimeout)
	}
}

var readyPort = regexp.MustCompile(`local database ready on 127\.0\.0\.1:(\d+) `)

// databasePort returns the port orbit dev said its database listens on.
func (p *devProcess) databasePort(t *testing.T) string {
	t.Helper()
	m := readyPort.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("orbit dev named no database port:\n%s", p.out)
	}
	return m[1]
}

// With the listen address taken, orbit dev fails at once with one line that
// names the address and how to change it, before it starts a database,
// migrates or writes credentials.
func TestDev_ChecksTheListenerFirst(t *testing.T) {
	t.Parallel()
	bin := orbitproc.Build(t, t.TempDir(), false)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")

	p := startDev(t, bin, dir, "--listen", addr, "--state-dir", state)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("orbit dev with %s taken still runs after 10s:\n%s", addr, p.out)
	}
	if p.err == nil {
		t.Fatalf("orbit dev with %s taken exited 0", addr)
	}
	out := strings.TrimSpace(p.out.String())
	if strings.Contains(out, "\n") {
		t.Errorf("orbit dev printed more than one line:\n%s", out)
	}
	for _, want := range []string{"orbit: ", addr, "--listen", "ORBIT_SERVER_LISTEN"} {
		if !strings.Contains(out, want) {
			t.Errorf("orbit dev's error %q does not name %q", out, want)
		}
	}
	for _, name := range []string{"mysql", "dev.credentials.json"} {
		if _, err := os.Stat(filepath.Join(state, name)); err == nil {
			t.Errorf("orbit dev made %s before checking the listener", name)
		}
	}
}

// orbit dev keeps its database on the same port from one run to the next,
// so that an exported DSN stays valid; only when that port is taken does it
// choose another, and says so.
func TestDev_KeepsTheDatabasePort(t *testing.T) {
	t.Parallel()
	bin := orbitproc.Build(t, t.TempDir(), false)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	run := func() *devProcess {
		p := startDev(t, bin, dir, "--listen", orbitproc.FreeAddr(t), "--state-dir", state)
		p.waitFor(t, "orbit listening on ")
		return p
	}

	first := run()
	port := first.databasePort(t)
	first.stop(t)
	if b, err := os.ReadFile(filepath.Join(state, "mysql.port")); err != nil || strings.TrimSpace(string(b)) != port {
		t.Errorf("state dir remembers port %q (%v), want %s", b, err, port)
	}

	second := run()
	if got := second.databasePort(t); got != port {
		t.Errorf("second run's database port is %s, want %s again", got, port)
	}
	second.stop(t)

	taken, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("cannot take port %s: %v", port, err)
	}
	defer taken.Close()
	third := run()
	if got := third.databasePort(t); got == port {
		t.Errorf("third run used the taken port %s", port)
	}
	if out := third.out.String(); !strings.Contains(out, "port "+port+" of the local database") || !strings.Contains(out, "is taken") {
		t.Errorf("third run did not say that port %s is taken:\n%s", port, out)
	}
	third.stop(t)
}
