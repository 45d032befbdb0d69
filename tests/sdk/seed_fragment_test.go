package sdk_test

import (
	"context"
	"testing"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// seedFragment is the management fragment of seed 001 §8, as written (the
// compile-only copy is sdk/go/seed_example_test.go).
func seedFragment(ctx context.Context, client *orbit.Client, key, pauseKey, queueID string) error {
	created, err := client.CreateSubscription(ctx, key, orbit.CreateSubscriptionRequest{
		Name:        "object-results",
		QueueID:     queueID,
		MaxPending:  100,
		MaxAttempts: 20,
	})
	if err != nil {
		return err
	}
	current, err := client.GetSubscription(ctx, created.Subscription.ID)
	if err != nil {
		return err
	}
	_, err = client.ConfigureSubscription(ctx, current.ID, pauseKey, orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: current.Revision,
		Enabled:          false,
		Reason:           "receiver maintenance",
	})
	return err
}

// The seed's fragment creates, reads and pauses a subscription (S-25).
// Run a second time with the same keys, the create is replayed, but the
// pause now carries the revision the pause itself produced, not the one of
// its first request: that is another request under the same key, refused
// with IDEMPOTENCY_CONFLICT, and nothing changes (seed §3, S-15).
func TestS25_SeedFragmentRunsAsWritten(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	const key, pauseKey = "object-results:create", "object-results:pause:1"
	if err := seedFragment(ctx, f.client, key, pauseKey, f.queueID); err != nil {
		t.Fatal(err)
	}
	page, err := f.client.ListSubscriptions(ctx, orbit.ListSubscriptionsRequest{QueueID: f.queueID})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 {
		t.Fatalf("%d subscriptions, want 1", len(page.Items))
	}
	s := page.Items[0]
	if s.Name != "object-results" || s.Enabled || s.Revision != 2 || s.MaxPending != 100 || s.MaxAttempts != 20 ||
		s.QueueID != f.queueID || s.CredentialID != f.cred.CredentialID {
		t.Errorf("subscription = %+v; want object-results paused at revision 2", s)
	}

	err = seedFragment(ctx, f.client, key, pauseKey, f.queueID)
	if code := apiCode(t, err); code != orbit.CodeIdempotencyConflict {
		t.Errorf("second run: %v; want IDEMPOTENCY_CONFLICT from the pause", err)
	}
	again, err := f.client.ListSubscriptions(ctx, orbit.ListSubscriptionsRequest{QueueID: f.queueID})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Items) != 1 || again.Items[0].Revision != 2 || again.Items[0].Enabled {
		t.Errorf("after the second run: %+v; want the one subscription, paused at revision 2", again.Items)
	}
}
