package orbit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

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
		return err // not nil: a NACK, the event comes again after the retry policy's delay
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

// errSchemaUnknown marks events this receiver can never handle.
var errSchemaUnknown = errors.New("unknown snapshot schema")

// The handler's result decides what the consumer tells the server: nil
// acknowledges; Retry NACKs with a delay of the handler's choosing; Reject
// sets a poison event aside as a dead letter (EXPIRED, REJECTED) that only
// an operator's retry brings back; any other error NACKs and lets the
// subscription's retry policy choose the delay (1 s, then longer, by
// default). A handler that runs long keeps its lease: the consumer extends
// it while the handler runs, up to MaxLeaseExtension, and cancels ctx if
// an extension is refused.
func ExampleEventConsumer_handlerResults() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	var inbox *sql.DB // the receiver's own database
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: creds.URL, Token: creds.Token, SubscriptionID: "22222222222222222222222222222222",
		MaxLeaseExtension: 10 * time.Minute,
	}, func(ctx context.Context, d *orbit.Delivery) error {
		var snapshot struct {
			SchemaVersion int `json:"schema_version"`
		}
		if err := json.Unmarshal(d.Event.Snapshot, &snapshot); err != nil || snapshot.SchemaVersion != 1 {
			return orbit.Reject(fmt.Sprintf("%v: %v", errSchemaUnknown, err)) // reject: set aside for good
		}
		_, err := inbox.ExecContext(ctx, `INSERT IGNORE INTO inbox (event_id, type, task_id, snapshot) VALUES (?, ?, ?, ?)`,
			d.Event.ID, d.Event.Type, d.Event.AggregateID, []byte(d.Event.Snapshot))
		var mysqlErr interface{ Timeout() bool }
		switch {
		case err == nil:
			return nil // ACK
		case errors.As(err, &mysqlErr) && mysqlErr.Timeout():
			return orbit.Retry(err, 30*time.Second) // NACK: again in 30 s
		default:
			return err // NACK: again per the subscription's retry policy
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := consumer.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
