//go:build linux

package integration_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
)

// A Ctrl-C (SIGINT) or SIGTERM that stops `receiver consume` cleanly ends
// it with status 0, as the README says: for the example's own binary and
// for `orbit receiver consume`.
func TestReceiverConsume_CtrlCExitsZero(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	example := buildReceiver(t)
	orbitBin := orbitproc.Build(t, t.TempDir(), false)
	p := startPlatform(t)
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, nil, 0)

	for _, tt := range []struct {
		name string
		bin  string
		args []string
		sig  syscall.Signal
	}{
		{"ExampleSIGINT", example, []string{"consume"}, syscall.SIGINT},
		{"ExampleSIGTERM", example, []string{"consume"}, syscall.SIGTERM},
		{"OrbitSIGINT", orbitBin, []string{"receiver", "consume"}, syscall.SIGINT},
		{"OrbitSIGTERM", orbitBin, []string{"receiver", "consume"}, syscall.SIGTERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := newConsumer()
			proc := startChild(t, tt.bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), tt.args...)
			proc.waitOutput(t, ctx, fmt.Sprintf("consuming subscription=%s queue=%s receiver=%s\n", sub.ID, c.QueueID, name))
			if err := proc.cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			if _, err := proc.waitExit(t, receiver.ConsumeStopTimeout+5*time.Second); err != nil {
				t.Errorf("consume exited with %v after %s, want status 0\nstderr:\n%s", err, tt.sig, proc.stderr)
			}
		})
	}
}
