package receiver

import (
	"context"
	"fmt"
	"io"
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
	sub, err := ownSubscription(ctx, cfg, "prune", "refusing to prune")
	if err != nil {
		return err
	}
	if sub.RedeliveryHorizon == nil {
		return fmt.Errorf("prune: the server does not report the redelivery_horizon of subscription %s; nothing pruned", sub.ID)
	}
	horizon := *sub.RedeliveryHorizon
	db, store, err := openStore(ctx, cfg, sub.QueueID)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := store.InboxPrune(ctx, horizon)
	if err != nil {
		return fmt.Errorf("prune: after %d records: %w", n, redact(err))
	}
	fmt.Fprintf(out, "pruned=%d redelivery_horizon=%d subscription=%s\n", n, horizon, sub.ID)
	return nil
}
