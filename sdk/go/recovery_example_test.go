package orbit_test

import (
	"context"
	"errors"
	"log"
	"sync"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// A bulk retry is two calls: the count, which changes nothing, then the
// retry with that count as the guard. If dead letters were added or
// retried meanwhile, the retry changes nothing and says so; count again.
func ExampleClient_RetryDeadLetters() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	client, err := creds.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	subscriptionID := "0123456789abcdef0123456789abcdef"
	req := orbit.RetryDeadLettersRequest{
		Filter:             orbit.DeadLetterFilter{ExpiredReason: "ATTEMPTS_EXHAUSTED"},
		AdditionalAttempts: 3,
		Reason:             "downstream fixed",
	}
	n, err := client.CountDeadLetters(ctx, subscriptionID, req)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d dead letters, first %v", n.Matched, n.Sample)
	// The key is chosen, and persisted, before the call.
	res, err := client.RetryDeadLetters(ctx, subscriptionID, "retry-dead-letters-2026-09-17", req, n.Matched)
	var apiErr *orbit.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == orbit.CodeStateConflict:
		log.Fatalf("the dead letters changed since the count: %s", apiErr.Message)
	case err != nil:
		log.Fatal(err)
	}
	log.Printf("operation %s retried %d deliveries", res.Operation.ID, res.Operation.Count)
}

// The stuck-work report lists the deliveries whose handler has held the
// lease for more than a minute, with the connection that holds each.
func ExampleClient_ListStuckDeliveries() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	client, err := creds.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	page, err := client.ListStuckDeliveries(context.Background(), "0123456789abcdef0123456789abcdef",
		orbit.StuckRequest{OlderThan: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.Items {
		log.Printf("delivery %s held by session %s since %s", d.ID, d.LeaseSessionID, d.LeasedAt)
	}
}

// intentStore keeps ACK proofs in the receiver's own database; here a map
// stands in for it.
type intentStore struct {
	mu     sync.Mutex
	proofs map[string]orbit.AckProof
}

func (s *intentStore) add(p orbit.AckProof) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proofs[p.DeliveryID] = p
}

func (s *intentStore) AckIntents(context.Context) ([]orbit.AckProof, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []orbit.AckProof
	for _, p := range s.proofs {
		out = append(out, p)
	}
	return out, nil
}

func (s *intentStore) AckIntentSettled(_ context.Context, p orbit.AckProof) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.proofs[p.DeliveryID]; ok && cur.Epoch <= p.Epoch {
		delete(s.proofs, p.DeliveryID)
	}
	return nil
}

// With AckIntents, the handler stores the delivery's proof in the same
// transaction as its business change; a consumer restarted after a crash
// between that commit and the ACK sends the stored proof first, so the
// event is not delivered again.
func ExampleEventConsumerConfig_ackIntents() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	store := &intentStore{proofs: map[string]orbit.AckProof{}}
	c, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: creds.URL, Token: creds.Token, SubscriptionID: "0123456789abcdef0123456789abcdef",
		AckIntents: store,
	}, func(ctx context.Context, d *orbit.Delivery) error {
		// BEGIN; apply d.Event, keyed by d.Event.ID; store d.Proof; COMMIT.
		store.add(d.Proof)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
