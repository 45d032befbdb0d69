package sdk_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The SDK's recovery calls (K-16) against the real server's K-7 … K-11 and
// K-14 endpoints.

// requireRecovery skips a test while the server lacks the recovery
// endpoints: they come with the subscription's redelivery_horizon (K-12),
// which such a server does not report. It is the only reason to skip.
func requireRecovery(t *testing.T, s orbit.Subscription) {
	t.Helper()
	if s.RedeliveryHorizon == nil {
		t.Skip("the server has no recovery endpoints yet (K-7 … K-12, K-14): the subscription reports no redelivery_horizon")
	}
}

// ackOne takes the next delivery on a new event connection and
// acknowledges it.
func (f *fixture) ackOne(t *testing.T, subscriptionID string) *orbit.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()
	ec, err := orbit.DialEvents(ctx, orbit.EventConnConfig{BaseURL: f.srv.URL, Token: f.cred.Token, SubscriptionID: subscriptionID})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	d, err := ec.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Ack(ctx, d.Proof); err != nil {
		t.Fatal(err)
	}
	return d
}

// K-16 (K-7, K-6, K-10): dead letters are counted, then retried with the
// count as the guard; a wrong count changes nothing; a repeated key
// returns the original receipt.
func TestK16_RetryDeadLettersCountThenRetry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "dead-letters", MaxAttempts: 1})
	requireRecovery(t, s)
	var ids []string
	for _, name := range []string{"a", "b"} {
		d := f.waitDelivery(t, s.ID, f.cancelledTask(t, name).ID).Delivery
		f.expireDelivery(t, s.ID, d.ID)
		ids = append(ids, d.ID)
	}
	expired, err := f.client.ListEventDeliveries(ctx, s.ID, orbit.ListEventDeliveriesRequest{
		State: orbit.DeliveryStateExpired, ExpiredReason: "ATTEMPTS_EXHAUSTED",
	})
	if err != nil || len(expired.Items) != 2 || expired.Items[0].ExpiredReason != "ATTEMPTS_EXHAUSTED" || expired.Items[0].LastError == "" {
		t.Fatalf("dead letters = %+v, %v; want two, ATTEMPTS_EXHAUSTED, with a last_error", expired, err)
	}
	if got, err := f.client.GetSubscription(ctx, s.ID); err != nil || got.DeadLetters != 2 {
		t.Errorf("subscription = %+v, %v; want dead_letters 2", got, err)
	}

	req := orbit.RetryDeadLettersRequest{AdditionalAttempts: 2, Reason: "downstream fixed"}
	n, err := f.client.CountDeadLetters(ctx, s.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	if n.Matched != 2 || !slices.Equal(n.Sample, ids) {
		t.Errorf("count = %+v; want 2 with samples %v", n, ids)
	}
	if _, err := f.client.RetryDeadLetters(ctx, s.ID, "retry:wrong", req, 1); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("retry with a stale count: %v; want STATE_CONFLICT", err)
	}
	res, err := f.client.RetryDeadLetters(ctx, s.ID, "retry:1", req, n.Matched)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deduplicated || res.Operation.Kind != "RETRY" || res.Operation.Count != 2 || res.Operation.SubscriptionID != s.ID {
		t.Errorf("receipt = %+v", res)
	}
	again, err := f.client.RetryDeadLetters(ctx, s.ID, "retry:1", req, n.Matched)
	if err != nil || !again.Deduplicated || again.Operation.ID != res.Operation.ID {
		t.Errorf("repeated key = %+v, %v; want the original receipt", again, err)
	}
	for _, id := range ids {
		d, err := f.client.GetEventDelivery(ctx, s.ID, id)
		if err != nil || d.Delivery.State != orbit.DeliveryStatePending || d.Delivery.AttemptBudget != 3 || d.Delivery.ExpiredReason != "" {
			t.Errorf("delivery %s after the retry = %+v, %v; want PENDING with a budget of 3", id, d, err)
		}
	}
	// A range that selects nothing counts 0.
	from, to := uint64(1_000_000), uint64(2_000_000)
	req.Filter = orbit.DeadLetterFilter{FromSequence: &from, ToSequence: &to}
	if n, err := f.client.CountDeadLetters(ctx, s.ID, req); err != nil || n.Matched != 0 {
		t.Errorf("count of an empty range = %+v, %v", n, err)
	}
}

// K-16 (K-8, K-12): acknowledged events are counted, then replayed with the
// count as the guard; the delivery is PENDING again under its own id.
func TestK16_ReplayCountThenReplay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "replayed"})
	requireRecovery(t, s)
	f.cancelledTask(t, "a")
	d := f.ackOne(t, s.ID)

	got, err := f.client.GetSubscription(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.RedeliveryHorizon == nil || *got.RedeliveryHorizon > d.Sequence || got.Lag != 0 || got.BlockedReason != "" {
		t.Errorf("subscription after the ACK = %+v; want a horizon at or below %d, no lag, not blocked", got, d.Sequence)
	}
	req := orbit.ReplayRequest{FromSequence: *got.RedeliveryHorizon, ToSequence: d.Sequence, Reason: "rebuild the view"}
	n, err := f.client.CountReplay(ctx, s.ID, req)
	if err != nil || n.Matched != 1 || !slices.Equal(n.Sample, []string{d.ID}) {
		t.Fatalf("count = %+v, %v; want delivery %s", n, err, d.ID)
	}
	res, err := f.client.ReplayEvents(ctx, s.ID, "replay:1", req, 1)
	if err != nil || res.Operation.Kind != "REPLAY" || res.Operation.Count != 1 {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	after, err := f.client.GetEventDelivery(ctx, s.ID, d.ID)
	if err != nil || after.Delivery.State != orbit.DeliveryStatePending || after.Delivery.Attempts != 1 {
		t.Errorf("delivery after the replay = %+v, %v; want PENDING, attempts kept", after, err)
	}
	if _, err := f.client.ReplayEvents(ctx, s.ID, "replay:2", req, 1); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("a second replay expecting 1 ACKED delivery: %v; want STATE_CONFLICT (none is ACKED now)", err)
	}
}

// K-16 (K-9, K-11): a skip to the head dead-letters the PENDING delivery as
// SKIPPED and raises the revision; a delete with that revision removes the
// subscription, a repeat returns the original receipt, and the
// subscription is NOT_FOUND afterwards.
func TestK16_SkipThenDelete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "skipped"})
	requireRecovery(t, s)
	d := f.waitDelivery(t, s.ID, f.cancelledTask(t, "a").ID).Delivery

	if _, err := f.client.SkipSubscription(ctx, s.ID, "skip:stale", orbit.SkipRequest{ToHead: true, ExpectedRevision: s.Revision + 1, Reason: "stale"}); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("skip with a stale revision: %v; want STATE_CONFLICT", err)
	}
	skip, err := f.client.SkipSubscription(ctx, s.ID, "skip:1", orbit.SkipRequest{ToHead: true, ExpectedRevision: s.Revision, Reason: "poison backlog"})
	if err != nil {
		t.Fatal(err)
	}
	if skip.Operation.Kind != "SKIP" || skip.Operation.Count != 1 || skip.Subscription.Revision != s.Revision+1 || skip.Subscription.DeadLetters != 1 {
		t.Errorf("skip receipt = %+v", skip)
	}
	if got, err := f.client.GetEventDelivery(ctx, s.ID, d.ID); err != nil || got.Delivery.State != orbit.DeliveryStateExpired || got.Delivery.ExpiredReason != "SKIPPED" {
		t.Errorf("delivery after the skip = %+v, %v; want EXPIRED SKIPPED", got, err)
	}

	del := orbit.DeleteSubscriptionRequest{ExpectedRevision: skip.Subscription.Revision, Reason: "no longer needed"}
	res, err := f.client.DeleteSubscription(ctx, s.ID, "delete:1", del)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deduplicated || res.Deletion.SubscriptionID != s.ID || res.Deletion.Name != "skipped" || res.Deletion.DeletedAt.IsZero() {
		t.Errorf("deletion receipt = %+v", res)
	}
	again, err := f.client.DeleteSubscription(ctx, s.ID, "delete:1", del)
	if err != nil || !again.Deduplicated || again.Deletion != res.Deletion {
		t.Errorf("repeated delete = %+v, %v; want the original receipt", again, err)
	}
	if _, err := f.client.GetSubscription(ctx, s.ID); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("deleted subscription: %v; want NOT_FOUND", err)
	}
	// Its name is free again.
	f.createSubscription(t, "create:2", orbit.CreateSubscriptionRequest{Name: "skipped"})
}

// K-16 (K-14): a delivery held by a connection and a task held by a worker
// show in the stuck-work reports with their sessions; a threshold above
// their age hides them.
func TestK16_StuckDeliveriesAndTasks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "stuck"})
	requireRecovery(t, s)
	f.cancelledTask(t, "a")
	ec, err := orbit.DialEvents(ctx, orbit.EventConnConfig{BaseURL: f.srv.URL, Token: f.cred.Token, SubscriptionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	d, err := ec.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	page, err := f.client.ListStuckDeliveries(ctx, s.ID, orbit.StuckRequest{})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != d.ID || page.Items[0].LeaseSessionID != ec.Welcome().SessionID ||
		page.Items[0].LeasedAt.IsZero() || page.Items[0].State != orbit.DeliveryStateLeased {
		t.Errorf("stuck deliveries = %+v, %v; want %s held by session %s", page, err, d.ID, ec.Welcome().SessionID)
	}
	if page, err := f.client.ListStuckDeliveries(ctx, s.ID, orbit.StuckRequest{OlderThan: time.Hour}); err != nil || len(page.Items) != 0 {
		t.Errorf("deliveries stuck for an hour = %+v, %v; want none", page, err)
	}

	// A worker that holds its task until the test ends.
	workerCred := f.srv.Credential(t, servertest.CredentialParams{Permissions: append([]string{"tasks:work"}, allPermissions...)})
	worker := newClient(t, f.srv, workerCred.Token)
	task, err := worker.SubmitTask(ctx, "stuck:submit", orbit.SubmitTaskRequest{QueueID: workerCred.QueueID, Input: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	w, err := orbit.NewWorker(orbit.WorkerConfig{BaseURL: f.srv.URL, Token: workerCred.Token, QueueID: workerCred.QueueID},
		func(ctx context.Context, _ *orbit.AssignedTask) orbit.Outcome {
			close(started)
			<-ctx.Done()
			return orbit.Release("test over")
		})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		<-done
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the worker got no task")
	}
	tasks, err := worker.ListStuckTasks(ctx, workerCred.QueueID, orbit.StuckRequest{})
	if err != nil || len(tasks.Items) != 1 || tasks.Items[0].ID != task.Task.ID || tasks.Items[0].State != orbit.TaskStateRunning ||
		tasks.Items[0].LeaseSessionID == "" || tasks.Items[0].LeasedAt.IsZero() {
		t.Errorf("stuck tasks = %+v, %v; want task %s RUNNING with its session", tasks, err, task.Task.ID)
	}
	if tasks, err := worker.ListStuckTasks(ctx, workerCred.QueueID, orbit.StuckRequest{OlderThan: time.Hour}); err != nil || len(tasks.Items) != 0 {
		t.Errorf("tasks stuck for an hour = %+v, %v; want none", tasks, err)
	}
}
