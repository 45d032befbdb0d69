package receiver

import (
	"context"
	"errors"
	"io"
	"log/slog"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Consume receives an existing subscription's results and applies each
// through the Inbox until ctx ends (seed 000 §3); a stop by ctx, even during start, returns nil. At start it fetches the
// subscription and refuses to run if its queue is not the configured one, so
// a misconfigured receiver never burns delivery budget. It stops only this
// process: the shared subscription is not paused.
//
// Each event's transaction also stores the delivery's ACK proof as an ACK
// intent (K-13); on start and after every reconnection the consumer first
// sends the ACKs of all uncleared intents, so an event committed by a
// process killed before its ACK is acknowledged without being delivered
// again while its lease stands.
func Consume(ctx context.Context, cfg *Config, out io.Writer, logger *slog.Logger) error {
	err := consume(ctx, cfg, out, logger)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// SIGINT or SIGTERM while starting (for example while the platform
		// does not answer yet): a requested stop, not a failure.
		return nil
	}
	return err
}

func consume(ctx context.Context, cfg *Config, out io.Writer, logger *slog.Logger) error {
	sub, err := ownSubscription(ctx, cfg, "consume", "refusing to start")
	if err != nil {
		return err
	}
	db, store, err := openStore(ctx, cfg, sub.QueueID)
	if err != nil {
		return err
	}
	defer db.Close()
	p := &printer{out: out}
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: cfg.Credentials.URL, Token: cfg.Credentials.Token, SubscriptionID: sub.ID,
		Capacity: ConsumeConcurrency, Concurrency: ConsumeConcurrency,
		ShutdownTimeout: ConsumeStopTimeout / 2, Logger: logger,
		AckIntents: ackIntents{store: store, subscriptionID: sub.ID},
	}, applyHandler(store, p))
	if err != nil {
		return err
	}
	p.line("consuming subscription=%s queue=%s receiver=%s", sub.ID, sub.QueueID, cfg.ReceiverName)
	err = consumer.Run(ctx)
	p.line("stopped subscription=%s", sub.ID)
	return err
}
