package receiver

import (
	"context"
	"fmt"
	"io"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
)

// Prune deletes the receiver's Inbox records of events below the
// subscription's redelivery_horizon, and no others (K-12). It reads the
// subscription (ORBIT_SUBSCRIPTION_ID, with the credential that created
// it), refuses a subscription of another queue, and deletes the records of
// RECEIVER_NAME on that queue whose event sequence is below the horizon:
// the platform can never deliver those events again, so the dedup table
// stays bounded without risking a double apply. It prints
// `pruned=<n> redelivery_horizon=<h> subscription=<id>`. A server that does
// not report the horizon is an error, and nothing is deleted.
func Prune(ctx context.Context, cfg *Config, out io.Writer) error {
	if cfg.SubscriptionID == "" {
		return fmt.Errorf("%s is not set: give the id of a subscription this credential created", EnvSubscriptionID)
	}
	if !inbox.ValidConsumerName(cfg.ReceiverName) {
		return fmt.Errorf("%s: %q is not a valid receiver name (at most 64 ASCII letters, digits, '.', '_', '-', a letter or digit first)", EnvReceiverName, cfg.ReceiverName)
	}
	client, err := cfg.Credentials.NewClient()
	if err != nil {
		return err
	}
	sub, err := client.GetSubscription(ctx, cfg.SubscriptionID)
	if err != nil {
		return fmt.Errorf("prune: subscription %s: %w", cfg.SubscriptionID, err)
	}
	if sub.QueueID != cfg.Credentials.QueueID {
		return fmt.Errorf("prune: subscription %s belongs to queue %s, not the configured queue %s; refusing to prune", sub.ID, sub.QueueID, cfg.Credentials.QueueID)
	}
	if sub.RedeliveryHorizon == nil {
		return fmt.Errorf("prune: the server does not report the redelivery_horizon of subscription %s; nothing pruned", sub.ID)
	}
	horizon := *sub.RedeliveryHorizon
	db, err := OpenReceiverDB(ctx, cfg.ReceiverDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := inbox.NewStore(db, cfg.ReceiverName, sub.QueueID)
	if err != nil {
		return err
	}
	n, err := store.InboxPrune(ctx, horizon)
	if err != nil {
		return fmt.Errorf("prune: after %d records: %w", n, redact(err))
	}
	fmt.Fprintf(out, "pruned=%d redelivery_horizon=%d subscription=%s\n", n, horizon, sub.ID)
	return nil
}
