// Command receiver is the result-inbox example (seed 000): `receiver init`
// creates the receiver's tables in its own database, `receiver demo` shows
// the whole chain once, and `receiver consume` applies an existing
// subscription's results until SIGINT or SIGTERM.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
)

const usage = `usage: receiver init|demo|consume|prune

  init     create the receiver tables in ORBIT_RECEIVER_DSN, or those a newer
           schema added
  demo     subscribe, submit and cancel a task, apply its result, pause
  consume  apply the results of ORBIT_SUBSCRIPTION_ID until SIGINT/SIGTERM
  prune    delete Inbox records of events below the subscription's
           redelivery horizon

Environment: ORBIT_RECEIVER_DSN (the receiver's own database, named
explicitly), ORBIT_URL, ORBIT_CREDENTIALS_FILE, ORBIT_TOKEN, ORBIT_QUEUE_ID,
ORBIT_SUBSCRIPTION_ID (consume, prune), RECEIVER_NAME (default task-result-view).
`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := receiver.Main(ctx, os.Args[1], os.Stdout, logger); err != nil {
		fmt.Fprintln(os.Stderr, "receiver: "+err.Error())
		if err == receiver.ErrUsage {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}
