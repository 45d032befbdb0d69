//go:build linux

package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
)

// Child processes of the receiver tests: the example's real receiver
// binary, and this test binary re-executed as a consumer with a fault
// barrier. Every child dies with the test process (Pdeathsig) and is
// waited for.

const (
	// exampleDir is the result-inbox module, built on its own.
	exampleDir = "../../examples/result-inbox"
	// buildTimeout bounds building the receiver, which may compile the
	// module and the SDK on a cold cache.
	buildTimeout = 5 * time.Minute
	// exitTimeout bounds the wait for a killed process to be gone.
	exitTimeout = 20 * time.Second
)

// buildReceiver builds the example's cmd/receiver as its README does
// (GOWORK=off, in its own module) into a directory of the test and returns
// the binary's path.
func buildReceiver(t *testing.T) string {
	t.Helper()
	bin, err := buildReceiverIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildReceiverIn is buildReceiver into dir, for a build that runs while
// the test waits for something else.
func buildReceiverIn(dir string) (string, error) {
	bin := filepath.Join(dir, "receiver")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/receiver")
	cmd.Dir = exampleDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOWORK=off go build ./cmd/receiver: %v\n%s", err, out)
	}
	return bin, nil
}

// childProcess is a running child with its output.
type childProcess struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // what Wait returned; set before done is closed
}

// startChild starts name with args and exactly the environment env (plus
// PATH and HOME), killed when the test process dies and, unless it has
// exited, when the test ends; its output is logged if the test fails.
func startChild(t *testing.T, name string, env []string, args ...string) *childProcess {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &childProcess{name: filepath.Base(name), cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s (pid %d) stdout:\n%s\nstderr:\n%s", p.name, cmd.Process.Pid, p.stdout, p.stderr)
		}
	})
	return p
}

// kill sends SIGKILL and waits until the process is gone. It does nothing
// to a process that has exited.
func (p *childProcess) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(exitTimeout):
		t.Fatalf("%s (pid %d) did not exit within %s of SIGKILL", p.name, p.cmd.Process.Pid, exitTimeout)
	}
}

// waitExit waits up to limit for the process to exit and returns how long
// it took and what Wait returned; it fails the test when the process is
// still running then.
func (p *childProcess) waitExit(t *testing.T, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	select {
	case <-p.done:
		return time.Since(start), p.err
	case <-time.After(limit):
		t.Fatalf("%s (pid %d) still running %s later", p.name, p.cmd.Process.Pid, limit)
		return 0, nil
	}
}

// waitOutput waits until the process's standard output holds s.
func (p *childProcess) waitOutput(t *testing.T, ctx context.Context, s string) {
	t.Helper()
	waitUntil(t, ctx, p.name+" printing "+s, func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before printing %q:\nstdout:\n%s\nstderr:\n%s", p.name, p.err, s, p.stdout, p.stderr)
		default:
		}
		return strings.Contains(p.stdout.String(), s)
	})
}

// consumeEnv is the environment of `receiver consume` for a credential
// file, a subscription, a receiver database and a receiver name, as seed
// 000 §3 lists it. ORBIT_URL overrides the file's URL when url is not
// empty.
func consumeEnv(c *credential, subscriptionID, dsn, name, url string) []string {
	env := []string{
		orbit.EnvCredentialsFile + "=" + c.Path,
		receiver.EnvSubscriptionID + "=" + subscriptionID,
		receiver.EnvReceiverDSN + "=" + dsn,
		receiver.EnvReceiverName + "=" + name,
	}
	if url != "" {
		env = append(env, orbit.EnvURL+"="+url)
	}
	return env
}
