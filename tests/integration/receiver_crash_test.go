//go:build linux

package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The consumer process of TestR22 is this test binary run again with
// envCrashConsumer set. Its handler commits the event through the Inbox
// and then never returns: the fault barrier, which exists only in this
// test binary. The process is entered from init, before TestMain,
// because TestMain would set up the shared databases again (and, on a
// shared server, find them held by the parent).
const (
	envCrashConsumer = "ORBIT_IT_CRASH_CONSUMER" // "1" in the child
	envCrashURL      = "ORBIT_IT_CRASH_URL"
	envCrashToken    = "ORBIT_IT_CRASH_TOKEN"
	envCrashSub      = "ORBIT_IT_CRASH_SUBSCRIPTION"
	envCrashQueue    = "ORBIT_IT_CRASH_QUEUE"
	envCrashDSN      = "ORBIT_IT_CRASH_DSN"
	envCrashName     = "ORBIT_IT_CRASH_NAME"
	// envCrashIntents "1" makes the child store each delivery's ACK proof
	// as an ACK intent in its business transaction (K-13), as `receiver
	// consume` does.
	envCrashIntents = "ORBIT_IT_CRASH_INTENTS"

	// crashCommitted is what the child prints once an event is committed.
	crashCommitted = "committed event="
)

func init() {
	if os.Getenv(envCrashConsumer) == "1" {
		os.Exit(crashConsumer())
	}
}

// crashConsumer consumes the subscription with the SDK's EventConsumer; its
// handler applies the event through inbox.Store.Apply (or, with
// envCrashIntents, ApplyWithIntent), prints that it committed, and blocks
// for ever before returning, so the SDK never acknowledges. The parent
// kills it.
func crashConsumer() int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "crash consumer:", err)
		return 1
	}
	db, err := receiver.OpenReceiverDB(ctx, os.Getenv(envCrashDSN))
	if err != nil {
		return fail(err)
	}
	store, err := inbox.NewStore(db, os.Getenv(envCrashName), os.Getenv(envCrashQueue))
	if err != nil {
		return fail(err)
	}
	barrier := make(chan struct{}) // never closed
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: os.Getenv(envCrashURL), Token: os.Getenv(envCrashToken), SubscriptionID: os.Getenv(envCrashSub),
		Capacity: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, func(ctx context.Context, d *orbit.Delivery) error {
		raw, err := receiver.EventJSON(d)
		if err != nil {
			return err
		}
		var res inbox.Result
		if os.Getenv(envCrashIntents) == "1" {
			res, err = store.ApplyWithIntent(ctx, raw, inbox.AckIntent{
				SubscriptionID: d.SubscriptionID, DeliveryID: d.Proof.DeliveryID, Epoch: d.Proof.Epoch, LeaseSecret: d.Proof.LeaseSecret,
			})
		} else {
			res, err = store.Apply(ctx, raw)
		}
		if err != nil {
			fmt.Printf("event=%s outcome=%s\n", d.Event.ID, receiver.Classify(res, err))
			return err
		}
		fmt.Printf("%s%s delivery=%s\n", crashCommitted, d.Event.ID, d.ID)
		<-barrier
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return fail(consumer.Run(ctx))
}

// R-22 (R-17 "killed after commit", a receiver without ACK intents): the
// consumer process commits an event's business transaction and is
// SIGKILLed before its handler returns;
// the database shows the commit while the platform shows the delivery
// LEASED, attempted once and without an ACK. The real `receiver consume`
// started next, with the same receiver name, gets the redelivery once the
// real 30 s lease has run out, finds the Inbox record and acknowledges the
// same delivery with its new proof: attempts=2, applied_events still 1.
//
// The platform runs in this process, so it outlives the consumer.
func TestR22_KilledAfterCommitIsDedupedByTheNextProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), processTestTimeout)
	defer cancel()
	p := startPlatform(t) // the default 30 s event lease
	c := p.bootstrap(t, "inbox-demo")
	sub := c.subscribe(t, ctx, []string{orbit.EventTypeTaskCancelled}, 0)
	name := newConsumer()

	// The receiver binary builds while the lease runs.
	type built struct {
		bin string
		err error
	}
	buildDir := t.TempDir()
	build := make(chan built, 1)
	go func() {
		bin, err := buildReceiverIn(buildDir)
		build <- built{bin, err}
	}()

	first := startChild(t, os.Args[0], []string{
		envCrashConsumer + "=1", envCrashURL + "=" + p.URL, envCrashToken + "=" + c.Token, envCrashSub + "=" + sub.ID,
		envCrashQueue + "=" + c.QueueID, envCrashDSN + "=" + env.receiverDSN, envCrashName + "=" + name,
	}, "-test.run=^$")
	taskID := c.cancelledTask(t, ctx)

	// The business transaction has committed; the platform still holds the
	// delivery LEASED, attempted once, not acknowledged.
	leased := deliveryOf(t, ctx, sub.ID, taskID, "leased to the first process", func(d delivery) bool {
		return d.State == orbit.DeliveryStateLeased
	})
	first.waitOutput(t, ctx, crashCommitted+leased.EventID)
	if applied, found := inboxApplied(t, ctx, name, c.QueueID, leased.EventID); !found || !applied {
		t.Fatalf("the first process printed its commit but the Inbox shows found=%v applied=%v", found, applied)
	}
	if applied, _, found := viewOf(t, ctx, name, c.QueueID, taskID); !found || applied != 1 {
		t.Fatalf("view after the first commit: found=%v applied_events=%d, want 1", found, applied)
	}
	d := deliveries(t, ctx, sub.ID)[taskID]
	if d.State != orbit.DeliveryStateLeased || d.Attempts != 1 || d.Epoch != 1 || d.AckEpoch.Valid {
		t.Fatalf("before the kill the delivery is %+v; want LEASED, attempts 1, epoch 1, no ACK", d)
	}
	first.kill(t)
	killedAt := time.Now()

	b := <-build
	if b.err != nil {
		t.Fatal(b.err)
	}
	second := startChild(t, b.bin, consumeEnv(c, sub.ID, env.receiverDSN, name, ""), "consume")
	acked := deliveryOf(t, ctx, sub.ID, taskID, "ACKED by the second process", func(d delivery) bool {
		return d.State == orbit.DeliveryStateAcked
	})
	t.Logf("redelivered and acknowledged %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	if acked.ID != leased.ID || acked.Attempts != 2 || acked.Epoch != 2 || acked.AckEpoch.Int64 != 2 {
		t.Errorf("after the redelivery the delivery is %+v; want %s ACKED at attempt 2 with the epoch-2 proof", acked, leased.ID)
	}
	if applied, _, found := viewOf(t, ctx, name, c.QueueID, taskID); !found || applied != 1 {
		t.Errorf("view after the redelivery: applied_events %d, want still 1", applied)
	}
	second.waitOutput(t, ctx, fmt.Sprintf("event=%s type=task.cancelled outcome=duplicate\n", acked.EventID))

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := second.waitExit(t, receiver.ConsumeStopTimeout+5*time.Second); err != nil {
		t.Errorf("the second process exited with %v", err)
	}
	checkConsumeOutput(t, second.stdout.String(), second.stderr.String(), c.Token)
	if strings.Count(second.stdout.String(), "event=") != 1 {
		t.Errorf("the second process handled more than the one event:\n%s", second.stdout)
	}
}
