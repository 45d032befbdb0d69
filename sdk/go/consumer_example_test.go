package orbit_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The handler stores each event in the receiver's Inbox, keyed by the
// event ID, before returning nil: only then is the delivery acknowledged.
// A repeated delivery finds the row and is acknowledged again. Run returns
// after Ctrl-C once the acknowledgements due are sent (within
// ShutdownTimeout).
func ExampleEventConsumer() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	var inbox *sql.DB // the receiver's own database
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: creds.URL, Token: creds.Token, SubscriptionID: "22222222222222222222222222222222", Capacity: 4,
	}, func(ctx context.Context, d *orbit.Delivery) error {
		_, err := inbox.ExecContext(ctx, `INSERT IGNORE INTO inbox (event_id, type, task_id, snapshot) VALUES (?, ?, ?, ?)`,
			d.Event.ID, d.Event.Type, d.Event.AggregateID, []byte(d.Event.Snapshot))
		return err // not nil: no ACK, the event comes again
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := consumer.Run(ctx); err != nil {
		log.Fatal(err) // retrying cannot help: a revoked credential, a foreign subscription, …
	}
}
