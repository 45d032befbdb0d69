//go:build chaos

package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The SDK worker and consumer processes of the run are this test binary run
// again with envRole set; they are entered from init, before TestMain,
// which would start a database server of its own. Each prints one line per
// handler call, which the parent counts: workers "start <task>" and
// "done <task>", consumers "got <event>".
const (
	envRole  = "ORBIT_CHAOS_ROLE" // "worker" or "consumer"
	envURL   = "ORBIT_CHAOS_URL"
	envToken = "ORBIT_CHAOS_TOKEN"
	envQueue = "ORBIT_CHAOS_QUEUE"
	envSub   = "ORBIT_CHAOS_SUBSCRIPTION"
	envName  = "ORBIT_CHAOS_NAME"

	// taskWork is how long a task's handler works: long enough for a
	// SIGKILL to find tasks in the middle of their handler.
	taskWork = 20 * time.Millisecond
	// workerCapacity and consumerCapacity are the leases each process
	// holds at most.
	workerCapacity   = 16
	consumerCapacity = 32
)

func init() {
	switch os.Getenv(envRole) {
	case "worker":
		os.Exit(runChild(runWorker))
	case "consumer":
		os.Exit(runChild(runConsumer))
	}
}

// runChild runs fn until SIGTERM or SIGINT and returns the exit status.
func runChild(fn func(ctx context.Context, out *lineOut) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := fn(ctx, &lineOut{w: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		return 1
	}
	return 0
}

// lineOut writes whole lines to w, one write each, so that a line is
// either in the pipe or not when the process is killed.
type lineOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *lineOut) line(format string, args ...any) {
	b := fmt.Appendf(nil, format+"\n", args...)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
}

func childLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func childBackoff() orbit.BackoffConfig {
	return orbit.BackoffConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
}

// runWorker is an SDK worker whose tasks echo their input after taskWork.
func runWorker(ctx context.Context, out *lineOut) error {
	w, err := orbit.NewWorker(orbit.WorkerConfig{
		BaseURL: os.Getenv(envURL), Token: os.Getenv(envToken), QueueID: os.Getenv(envQueue),
		Capacity: workerCapacity, WorkerName: os.Getenv(envName), Backoff: childBackoff(),
		ShutdownTimeout: 5 * time.Second, Logger: childLogger(),
	}, func(ctx context.Context, task *orbit.AssignedTask) orbit.Outcome {
		out.line("start %s", task.ID)
		select {
		case <-time.After(taskWork):
		case <-ctx.Done():
			return orbit.Release("worker stopping")
		}
		out.line("done %s", task.ID)
		return orbit.Succeeded(task.Input)
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// runConsumer is an SDK EventConsumer that acknowledges every delivery.
func runConsumer(ctx context.Context, out *lineOut) error {
	c, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: os.Getenv(envURL), Token: os.Getenv(envToken), SubscriptionID: os.Getenv(envSub),
		Capacity: consumerCapacity, Backoff: childBackoff(), ShutdownTimeout: 5 * time.Second, Logger: childLogger(),
	}, func(_ context.Context, d *orbit.Delivery) error {
		out.line("got %s", d.Event.ID)
		return nil
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// child is a running child process whose standard output is passed to a
// line handler.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}
	err    error // what Wait returned; set before done is closed
}

// startChild starts bin with args and env (plus PATH and HOME); every
// complete line of its standard output goes to onLine, in order. It dies
// with the test process (Pdeathsig) and is killed when the test ends.
func startChild(t *testing.T, name, bin string, env []string, onLine func(string), args ...string) *child {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: name, cmd: cmd, stderr: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		readLines(stdout, onLine)
	}()
	go func() {
		<-lines // Wait closes the pipe: read it to the end first
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() && c.stderr.Len() > 0 {
			t.Logf("%s (pid %d) stderr, last part:\n%s", name, cmd.Process.Pid, c.stderr)
		}
	})
	return c
}

// readLines passes every complete line of r to onLine.
func readLines(r io.Reader, onLine func(string)) {
	buf := make([]byte, 64<<10)
	var pending []byte
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			onLine(string(pending[:i]))
			pending = pending[i+1:]
		}
		if err != nil {
			return
		}
	}
}

// kill sends SIGKILL and waits until the process is gone and its output
// read; it does nothing to a process that has exited.
func (c *child) kill(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %s: %v", c.name, err)
	}
	c.wait(t, 20*time.Second)
}

// stop sends SIGTERM and waits for the process to exit; it reports an
// exit status other than 0.
func (c *child) stop(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, 30*time.Second)
	if c.err != nil {
		t.Errorf("%s exited with %v after SIGTERM; stderr:\n%s", c.name, c.err, c.stderr)
	}
}

func (c *child) wait(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(limit):
		t.Fatalf("%s (pid %d) still running %s after a signal", c.name, c.cmd.Process.Pid, limit)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append([]byte(nil), b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// buildReceiver builds the result-inbox example's cmd/receiver as its
// README does (GOWORK=off, in its own module) into dir.
func buildReceiver(dir string) (string, error) {
	bin := filepath.Join(dir, "receiver")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/receiver")
	cmd.Dir = "../../examples/result-inbox"
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOWORK=off go build ./cmd/receiver: %v\n%s", err, out)
	}
	return bin, nil
}
