//go:build linux

package sdktest_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
)

// The orbit binary as a child process, as internal/acceptance runs it.
const (
	// orbitBuildTimeout bounds building the binary, which may compile
	// every package on a cold cache.
	orbitBuildTimeout = 5 * time.Minute
	// orbitReadyTimeout bounds how long orbit serve may take to listen.
	orbitReadyTimeout = 30 * time.Second
	// orbitExitTimeout bounds how long the process takes to exit after
	// SIGKILL.
	orbitExitTimeout = 20 * time.Second
	// orbitReadyLine is what orbit serve prints once it accepts
	// connections.
	orbitReadyLine = "orbit listening on "
)

// buildOrbit builds ./cmd/orbit of this repository into dir, with the race
// detector when the tests have it, and returns the binary's path.
func buildOrbit(t testing.TB, dir string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "orbit")
	args := []string{"build", "-o", bin}
	if raceDetector {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/orbit")
	ctx, cancel := context.WithTimeout(context.Background(), orbitBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// orbitServe describes an `orbit serve` process.
type orbitServe struct {
	bin, dir, addr, dsn string
	env                 []string // ORBIT_* settings besides the DSN
}

// orbitProcess is one running `orbit serve`.
type orbitProcess struct {
	cmd    *exec.Cmd
	output *readyWriter
	done   chan struct{}
	err    error // what Wait returned; set before done is closed
}

// start runs `orbit serve --listen addr` and returns once it listens. The
// process dies with the test process (Pdeathsig) and is killed when the
// test ends; its output is logged if the test failed.
func (p orbitServe) start(t testing.TB) *orbitProcess {
	t.Helper()
	cmd := exec.Command(p.bin, "serve", "--listen", p.addr)
	cmd.Dir = p.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "ORBIT_MYSQL_DSN="+p.dsn)
	cmd.Env = append(cmd.Env, p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &readyWriter{ready: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start orbit serve: %v", err)
	}
	proc := &orbitProcess{cmd: cmd, output: out, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	t.Cleanup(func() {
		proc.kill(t)
		if t.Failed() {
			t.Logf("orbit serve on %s (pid %d):\n%s", p.addr, cmd.Process.Pid, out)
		}
	})
	select {
	case <-out.ready:
		return proc
	case <-proc.done:
		t.Fatalf("orbit serve exited before listening: %v\n%s", proc.err, out)
	case <-time.After(orbitReadyTimeout):
		t.Fatalf("orbit serve did not listen within %s:\n%s", orbitReadyTimeout, out)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *orbitProcess) kill(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill orbit serve: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(orbitExitTimeout):
		t.Fatalf("orbit serve (pid %d) did not exit within %s", p.cmd.Process.Pid, orbitExitTimeout)
	}
}

// readyWriter keeps a process's output and closes ready once it holds
// orbitReadyLine.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	seen  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.seen && bytes.Contains(w.buf.Bytes(), []byte(orbitReadyLine)) {
		w.seen = true
		close(w.ready)
	}
	return n, err
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
