package orbit_test

import (
	"context"
	"log"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// seedFragment is the management fragment of seed 001 §8, as written. Its
// copy in tests/sdk runs it against a real server.
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

// A subscription is created, read back and paused. Both keys are chosen
// and persisted before the first call: after a crash or a lost reply, the
// same calls with the same keys return the original receipts instead of
// creating a second subscription or pausing twice.
func ExampleClient_CreateSubscription() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	client, err := creds.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	const key, pauseKey = "object-results:create", "object-results:pause:1"
	if err := seedFragment(context.Background(), client, key, pauseKey, creds.QueueID); err != nil {
		log.Fatal(err)
	}
}
