//go:build linux

// Package orbitproc runs the orbit binary as a child process for tests that
// need a real server process: one they can SIGKILL and start again.
package orbitproc

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

const (
	// buildTimeout bounds building the orbit binary, which may compile
	// every package on a cold cache.
	buildTimeout = 5 * time.Minute
	// readyTimeout bounds how long orbit serve may take to listen.
	readyTimeout = 30 * time.Second
	// exitTimeout bounds how long a process may take to exit after a signal.
	exitTimeout = 20 * time.Second
	// readyLine is what orbit serve prints on standard output once it
	// accepts connections.
	readyLine = "orbit listening on "
)

// Build builds ./cmd/orbit of this repository (found by walking up from the
// test's directory) into dir and returns the binary's path; with race, the
// binary is built with the race detector.
func Build(t testing.TB, dir string, race bool) string {
	t.Helper()
	root := repoRoot(t)
	bin := filepath.Join(dir, "orbit")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/orbit")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	// go test puts the go command of its own GOROOT first on PATH.
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Process is one `orbit serve` child process.
type Process struct {
	cmd    *exec.Cmd
	output *readyWriter // standard output and standard error
	done   chan struct{}
	err    error // what Wait returned; set before done is closed
}

// Serve describes an orbit serve process.
type Serve struct {
	// Bin is the binary from Build; Dir its working directory; Addr the
	// listen address (FreeAddr); DSN the platform database.
	Bin, Dir, Addr, DSN string
	// Env holds ORBIT_* settings besides the DSN.
	Env []string
}

// Start runs `orbit serve --listen Addr` in Dir with the DSN and settings
// of p and returns once it listens. The process is killed when the
// test process dies (Pdeathsig) and, unless it has exited, when the test
// ends; its output is logged if the test failed.
func Start(t testing.TB, p Serve) *Process {
	t.Helper()
	cmd := exec.Command(p.Bin, "serve", "--listen", p.Addr)
	cmd.Dir = p.Dir
	// A developer's own ORBIT_* settings must not reach the server.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "ORBIT_MYSQL_DSN="+p.DSN)
	// Metrics on a free port, so that processes of parallel tests never
	// compete for 9090; p.Env may override it.
	cmd.Env = append(cmd.Env, config.EnvName("server.metrics_listen")+"=127.0.0.1:0")
	cmd.Env = append(cmd.Env, p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &readyWriter{ready: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start orbit serve: %v", err)
	}
	proc := &Process{cmd: cmd, output: out, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	t.Cleanup(func() {
		proc.Kill(t)
		if t.Failed() {
			t.Logf("orbit serve on %s (pid %d):\n%s", p.Addr, cmd.Process.Pid, out)
		}
	})
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-out.ready:
		return proc
	case <-proc.done:
		t.Fatalf("orbit serve exited before listening: %v\n%s", proc.err, out)
	case <-timer.C:
		t.Fatalf("orbit serve did not listen within %s:\n%s", readyTimeout, out)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to be gone. It does nothing
// to a process that has already exited.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill orbit serve: %v", err)
	}
	p.wait(t)
}

// Stop sends SIGTERM, waits for the process to exit and fails the test
// unless it exited with status 0.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop orbit serve: %v", err)
	}
	p.wait(t)
	if p.err != nil {
		t.Errorf("orbit serve exited with %v after SIGTERM", p.err)
	}
}

func (p *Process) wait(t testing.TB) {
	t.Helper()
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		t.Fatalf("orbit serve (pid %d) did not exit within %s", p.cmd.Process.Pid, exitTimeout)
	}
}

// CheckNoRace fails the test if the process reported a data race.
func (p *Process) CheckNoRace(t testing.TB) {
	t.Helper()
	if strings.Contains(p.output.String(), "WARNING: DATA RACE") {
		t.Errorf("orbit serve reported a data race")
	}
}

// Output returns what the process has written so far.
func (p *Process) Output() string { return p.output.String() }

// repoRoot finds the repository root: the nearest directory above the
// working directory that holds cmd/orbit.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "orbit", "main.go")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("orbitproc: no cmd/orbit above the working directory")
		}
		dir = parent
	}
}

// readyWriter keeps a process's output and closes ready once the output
// holds readyLine.
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
	if !w.seen && bytes.Contains(w.buf.Bytes(), []byte(readyLine)) {
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
