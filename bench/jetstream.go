package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// Settings of the JetStream row: NATS JetStream's own server (Debian's
// nats-server, which make bench installs) with a file store, measured as
// Orbit's drain is: a backlog published first, then drained by a pull
// consumer that acknowledges each message with AckSync (the server
// confirms the ACK, as Orbit's consumer waits for its ACK's commit).
const (
	jetstreamStream  = "BENCH"
	jetstreamSubject = "bench.results"
)

// jetstreamResult is the drain of one pull consumer at one fetch size.
type jetstreamResult struct {
	Fetch    int
	Messages int
	Elapsed  time.Duration
	Rate     float64
}

// jetstreamRun is the JetStream row: the server's version, the publish
// and one drain per fetch size.
type jetstreamRun struct {
	Version     string
	PublishRate float64
	Drains      []jetstreamResult
}

func (j *jetstreamResult) summary() string {
	return fmt.Sprintf("jetstream: %s messages drained with fetch %d in %s: %s delivered+AckSync/s",
		num(float64(j.Messages)), j.Fetch, j.Elapsed.Round(time.Millisecond), num(j.Rate))
}

// runJetStream starts nats-server with JetStream on a file store in a temp
// directory and a free loopback port, publishes n messages to a stream and
// drains them with a new durable pull consumer for each fetch size.
func runJetStream(ctx context.Context, n int, fetches []int, step func(string, ...any)) (*jetstreamRun, error) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			return nil, errors.New("no nats-server: install Debian's nats-server (make bench does as root)")
		}
		bin = "/usr/sbin/nats-server"
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("nats-server --version: %w", err)
	}
	run := &jetstreamRun{Version: string(trimSpace(out))}
	dir, err := os.MkdirTemp("", "orbit-bench-nats-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "store"))
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nats-server: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	if err := waitFor(ctx, 20*time.Second, 20*time.Millisecond, "nats-server", func() (bool, error) {
		c, err := nats.Connect(url, nats.Timeout(time.Second))
		if err != nil {
			return false, nil
		}
		nc = c
		return true, nil
	}); err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(1024))
	if err != nil {
		return nil, err
	}
	if _, err := js.AddStream(&nats.StreamConfig{
		Name: jetstreamStream, Subjects: []string{jetstreamSubject}, Storage: nats.FileStorage,
	}); err != nil {
		return nil, fmt.Errorf("add stream: %w", err)
	}
	began := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(jetstreamSubject, fmt.Appendf(nil, `{"i":%d,"result":{"ok":true}}`, i)); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return nil, errors.New("jetstream: publishing did not complete in 2 minutes")
	}
	run.PublishRate = float64(n) / time.Since(began).Seconds()
	step("jetstream: %s messages published at %s/s (async, acknowledged by the server)", num(float64(n)), num(run.PublishRate))
	for _, fetch := range fetches {
		r, err := jetstreamDrain(ctx, js, n, fetch)
		if err != nil {
			return nil, err
		}
		step("%s", r.summary())
		run.Drains = append(run.Drains, *r)
	}
	return run, nil
}

// jetstreamDrain drains the stream from its start with a new durable pull
// consumer, fetch messages per request, each acknowledged with AckSync.
func jetstreamDrain(ctx context.Context, js nats.JetStreamContext, n, fetch int) (*jetstreamResult, error) {
	durable := fmt.Sprintf("drain-%d", fetch)
	sub, err := js.PullSubscribe(jetstreamSubject, durable, nats.BindStream(jetstreamStream),
		nats.DeliverAll(), nats.AckExplicit(), nats.MaxAckPending(max(fetch, 1000)))
	if err != nil {
		return nil, fmt.Errorf("pull subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	began := time.Now()
	got := 0
	deadline := began.Add(4 * time.Minute)
	for got < n {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("jetstream fetch %d: %d of %d messages in 4 minutes", fetch, got, n)
		}
		msgs, err := sub.Fetch(fetch, nats.MaxWait(5*time.Second))
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		for _, m := range msgs {
			if err := m.AckSync(); err != nil {
				return nil, fmt.Errorf("ack: %w", err)
			}
			got++
		}
	}
	elapsed := time.Since(began)
	return &jetstreamResult{Fetch: fetch, Messages: got, Elapsed: elapsed, Rate: float64(got) / elapsed.Seconds()}, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
