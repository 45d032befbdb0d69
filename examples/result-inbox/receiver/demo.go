package receiver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
)

// errOtherTask refuses an event of another task on the demo's queue: it is
// neither applied nor acknowledged.
var errOtherTask = errors.New("demo: event of another task refused")

// otherTaskDelay is how long a refused event of another task is held back
// (the NACK's delay_ms): the demo's whole time budget, so that one run
// receives it once. Without a delay the subscription's retry policy would
// bring it back after a random delay of up to a second, to be refused again.
const otherTaskDelay = DemoTimeout

// Demo shows the whole chain once (seed 000 §2): it creates a subscription to
// task.cancelled, submits and cancels a waiting task, consumes with the SDK
// EventConsumer, applies the task's event twice through the Inbox (the
// second call finds the committed record), lets the SDK acknowledge, checks
// the view and pauses the subscription. Everything happens within
// DemoTimeout; on failure the task, subscription, delivery and business
// records are kept for inspection.
func Demo(ctx context.Context, cfg *Config, out io.Writer, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, DemoTimeout)
	defer cancel()
	if !inbox.ValidConsumerName(cfg.ReceiverName) {
		return fmt.Errorf("%s: %q is not a valid receiver name", EnvReceiverName, cfg.ReceiverName)
	}
	creds := cfg.Credentials
	client, err := creds.NewClient()
	if err != nil {
		return err
	}
	db, store, err := openStore(ctx, cfg, creds.QueueID)
	if err != nil {
		return err
	}
	defer db.Close()

	run := newID()
	created, err := client.CreateSubscription(ctx, "inbox-demo:create:"+run, orbit.CreateSubscriptionRequest{
		Name: "inbox-demo-" + run[:12], QueueID: creds.QueueID, Types: []string{"task.cancelled"},
	})
	if err != nil {
		return fmt.Errorf("demo: create subscription: %w", err)
	}
	sub := created.Subscription
	submitted, err := client.SubmitTask(ctx, "inbox-demo:submit:"+run, orbit.SubmitTaskRequest{
		QueueID: creds.QueueID, Input: json.RawMessage(`{"demo":"result-inbox"}`),
	})
	if err != nil {
		return fmt.Errorf("demo: submit task: %w", err)
	}
	taskID := submitted.Task.ID
	if _, err := client.CancelTask(ctx, taskID, "inbox-demo:cancel:"+run, orbit.CancelTaskRequest{Reason: "result-inbox demo"}); err != nil {
		return fmt.Errorf("demo: cancel task %s: %w", taskID, err)
	}

	var (
		mu        sync.Mutex
		duplicate bool
		handled   = make(chan struct{})
		once      sync.Once
	)
	handler := func(ctx context.Context, d *orbit.Delivery) error {
		if d.Event.AggregateID != taskID {
			fmt.Fprintf(out, "event=%s refused=other_task\n", d.Event.ID)
			return orbit.Retry(errOtherTask, otherTaskDelay)
		}
		raw, err := EventJSON(d)
		if err != nil {
			return err
		}
		// The same business transaction twice: the first advances the
		// view, the second finds the committed Inbox record.
		first, err := store.Apply(ctx, raw)
		if err != nil {
			return err
		}
		second, err := store.Apply(ctx, raw)
		if err != nil {
			return err
		}
		mu.Lock()
		duplicate = !first.Duplicate && first.Applied && second.Duplicate && second.Applied
		mu.Unlock()
		once.Do(func() { close(handled) })
		return nil
	}
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: creds.URL, Token: creds.Token, SubscriptionID: sub.ID,
		Capacity: 1, ShutdownTimeout: DemoShutdownTimeout, Logger: logger,
	}, handler)
	if err != nil {
		return err
	}
	consumeCtx, stopConsumer := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(consumeCtx) }()
	stop := func() error {
		stopConsumer()
		select {
		case err := <-done:
			return err
		case <-time.After(DemoShutdownTimeout + time.Second):
			return fmt.Errorf("demo: the consumer did not stop within %s", DemoShutdownTimeout)
		}
	}

	// Wait for the handler, then for the platform to confirm the ACK.
	select {
	case <-handled:
	case err := <-done:
		return fmt.Errorf("demo: the consumer stopped before the event arrived: %v", err)
	case <-ctx.Done():
		stop()
		return fmt.Errorf("demo: task %s: no event within %s", taskID, DemoTimeout)
	}
	if err := waitFor(ctx, func() bool { return consumer.Stats().Acked >= 1 }); err != nil {
		stop()
		return fmt.Errorf("demo: the ACK was not confirmed: %w", err)
	}
	if err := stop(); err != nil {
		return err
	}
	acked := consumer.Stats().Acked

	view, err := store.View(ctx, taskID)
	if err != nil {
		return fmt.Errorf("demo: read the task view: %w", redact(err))
	}
	mu.Lock()
	dup := duplicate
	mu.Unlock()
	fmt.Fprintf(out, "task=%s state=%s inbox_duplicate=%t applied_events=%d\n", taskID, view.LastState, dup, view.AppliedEvents)

	current, err := client.GetSubscription(ctx, sub.ID)
	if err != nil {
		return fmt.Errorf("demo: read subscription: %w", err)
	}
	// Only a demo that succeeded pauses its subscription; a failed one keeps
	// everything as it is for inspection.
	if !dup || view.AppliedEvents != 1 || view.LastState != "CANCELLED" || acked != 1 || current.PendingCount != 0 {
		fmt.Fprintf(out, "ack_confirmed=%d pending=%d subscription_enabled=%t\n", acked, current.PendingCount, current.Enabled)
		return fmt.Errorf("demo: unexpected outcome; the task, subscription, delivery and business records are kept for inspection")
	}
	paused, err := client.ConfigureSubscription(ctx, sub.ID, "inbox-demo:pause:"+run, orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: current.Revision, Enabled: false, Reason: "result-inbox demo finished",
	})
	if err != nil {
		return fmt.Errorf("demo: pause subscription: %w", err)
	}
	fmt.Fprintf(out, "ack_confirmed=%d pending=%d subscription_enabled=%t\n", acked, current.PendingCount, paused.Subscription.Enabled)
	return nil
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
