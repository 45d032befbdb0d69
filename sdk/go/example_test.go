package orbit_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os/signal"
	"syscall"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The key is chosen, and persisted, before the call: retrying with the same
// key returns the original receipt instead of creating a second task.
func ExampleClient_SubmitTask() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	client, err := creds.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	res, err := client.SubmitTask(ctx, "order-A-17", orbit.SubmitTaskRequest{
		QueueID:    creds.QueueID,
		Input:      json.RawMessage(`{"order":"A-17","amount":12345678901234567890123}`),
		Idempotent: true,
	})
	var apiErr *orbit.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == orbit.CodeIdempotencyConflict:
		log.Fatal("the key was used for another request")
	case err != nil:
		log.Fatal(err)
	}
	log.Printf("task %s is %s (revision %d, deduplicated %t)", res.Task.ID, res.Task.State, res.Task.Revision, res.Deduplicated)
}

// A worker runs until SIGINT or SIGTERM, then releases what it has not
// started and reports what it has finished.
func ExampleNewWorker() {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	w, err := orbit.NewWorker(orbit.WorkerConfig{
		BaseURL: creds.URL, Token: creds.Token, QueueID: creds.QueueID, Capacity: 4,
	}, func(ctx context.Context, t *orbit.AssignedTask) orbit.Outcome {
		var in struct {
			Order string `json:"order"`
		}
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return orbit.Failed("BAD_INPUT", "input is not an order")
		}
		select {
		case <-ctx.Done():
			return orbit.Release("stopped before charging")
		default:
		}
		// … charge the order, passing ctx along …
		return orbit.Succeeded(json.RawMessage(`{"charged":true}`))
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
