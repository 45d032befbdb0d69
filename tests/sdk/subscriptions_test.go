package sdk_test

import (
	"context"
	"fmt"
	"github.com/orbitrun/orbit/internal/auth"
	"slices"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// allTypes is the normalised type set of a subscription created without
// types (S-7).
var allTypes = []string{
	orbit.EventTypeTaskCancelled, orbit.EventTypeTaskFailed, orbit.EventTypeTaskNeedsReview, orbit.EventTypeTaskSucceeded,
}

func TestS6_CreateReplayReturnsOriginalReceipt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := orbit.CreateSubscriptionRequest{Name: "object-results", QueueID: f.queueID}
	first, err := f.client.CreateSubscription(ctx, "create:1", req)
	if err != nil {
		t.Fatal(err)
	}
	s := first.Subscription
	if first.Deduplicated || s.Revision != 1 || !s.Enabled || s.MaxPending != 100 || s.MaxAttempts != 20 ||
		!slices.Equal(s.Types, allTypes) || s.CredentialID != f.cred.CredentialID || s.CreatedAt.IsZero() {
		t.Errorf("first receipt = %+v", first)
	}

	// A change after the create does not show in the replayed receipt.
	if _, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: 1, Enabled: false, Reason: "maintenance",
	}); err != nil {
		t.Fatal(err)
	}
	replay, err := f.client.CreateSubscription(ctx, "create:1", req)
	if err != nil {
		t.Fatal(err)
	}
	if !replay.Deduplicated || replay.Subscription.Revision != 1 || !replay.Subscription.Enabled ||
		replay.Subscription.ID != s.ID || !replay.Subscription.UpdatedAt.Equal(s.UpdatedAt) {
		t.Errorf("replay = %+v; want the original receipt, deduplicated", replay)
	}

	req.MaxPending = 5
	_, err = f.client.CreateSubscription(ctx, "create:1", req)
	if code := apiCode(t, err); code != orbit.CodeIdempotencyConflict {
		t.Errorf("same key, other request: %v; want IDEMPOTENCY_CONFLICT", err)
	}
}

// FromSequence travels as a decimal string: "0" starts with the oldest
// event, so a result committed before the subscription is delivered; a
// subscription created without it starts after the head (S-4, S-4a).
func TestS4_CreateWithTypesAndFromSequence(t *testing.T) {
	t.Parallel()
	f := setup(t)
	task := f.cancelledTask(t, "before")
	zero := uint64(0)
	fromStart := f.createSubscription(t, "create:start", orbit.CreateSubscriptionRequest{
		Name: "from-start", Types: []string{orbit.EventTypeTaskSucceeded, orbit.EventTypeTaskCancelled},
		FromSequence: &zero, MaxPending: 7, MaxAttempts: 3,
	})
	if fromStart.CursorSequence != 0 {
		t.Errorf("cursor_sequence %d; want 0", fromStart.CursorSequence)
	}
	if !slices.Equal(fromStart.Types, []string{orbit.EventTypeTaskCancelled, orbit.EventTypeTaskSucceeded}) ||
		fromStart.MaxPending != 7 || fromStart.MaxAttempts != 3 {
		t.Errorf("subscription = %+v", fromStart)
	}
	fromHead := f.createSubscription(t, "create:head", orbit.CreateSubscriptionRequest{Name: "from-head"})
	if fromHead.CursorSequence != 1 {
		t.Errorf("cursor_sequence %d; want the head, 1", fromHead.CursorSequence)
	}

	d := f.waitDelivery(t, fromStart.ID, task.ID)
	if d.Delivery.AttemptBudget != 3 || d.Event.Sequence != 1 {
		t.Errorf("delivery = %+v; want attempt budget 3 for event 1", d.Delivery)
	}
	page, err := f.client.ListEventDeliveries(context.Background(), fromHead.ID, orbit.ListEventDeliveriesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 0 {
		t.Errorf("a subscription created after the result has %d deliveries", len(page.Items))
	}
}

func TestS12_GetSubscriptionReturnsCurrentStateToItsOwnerOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "mine"})
	if _, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: s.Revision, Enabled: false, Reason: "maintenance",
	}); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.GetSubscription(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.Revision != 2 || got.Enabled || got.Name != "mine" || !got.CreatedAt.Equal(s.CreatedAt) ||
		got.UpdatedAt.Before(s.UpdatedAt) {
		t.Errorf("get = %+v; want the current state, paused at revision 2", got)
	}

	// Another credential of the same namespace and queue sees nothing (S-1).
	other := newClient(t, f.srv, f.srv.Credential(t, servertest.CredentialParams{Permissions: allPermissions}).Token)
	if _, err := other.GetSubscription(ctx, s.ID); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("another credential: %v; want NOT_FOUND", err)
	}
	if _, err := f.client.GetSubscription(ctx, "0123456789abcdef0123456789abcdef"); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("unknown id: %v; want NOT_FOUND", err)
	}
	page, err := other.ListSubscriptions(ctx, orbit.ListSubscriptionsRequest{QueueID: f.queueID})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("another credential lists %v (%v); want nothing", page, err)
	}
}

func TestS13_ListSubscriptionsPagesNewestFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	for i := range 5 {
		f.createSubscription(t, fmt.Sprintf("create:%d", i), orbit.CreateSubscriptionRequest{Name: fmt.Sprintf("sub-%d", i)})
	}
	var all []orbit.Subscription
	req := orbit.ListSubscriptionsRequest{QueueID: f.queueID, Limit: 2}
	pages := 0
	for {
		page, err := f.client.ListSubscriptions(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			break
		}
		if len(page.Items) != 2 {
			t.Fatalf("page %d has %d items and a next cursor", pages, len(page.Items))
		}
		req.Cursor = page.NextCursor
	}
	if pages != 3 || len(all) != 5 {
		t.Fatalf("%d pages, %d items; want 3 pages of 5 items", pages, len(all))
	}
	sorted := slices.IsSortedFunc(all, func(a, b orbit.Subscription) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return compareStrings(b.ID, a.ID)
	})
	names := map[string]bool{}
	for _, s := range all {
		names[s.Name] = true
	}
	if !sorted || len(names) != 5 {
		t.Errorf("items %+v; want five distinct, created_at DESC, id DESC", all)
	}

	// A cursor is bound to its queue; the SDK hands the server's refusal on.
	_, err := f.client.ListSubscriptions(ctx, orbit.ListSubscriptionsRequest{QueueID: "0123456789abcdef0123456789abcdef", Cursor: req.Cursor})
	if code := apiCode(t, err); code != orbit.CodeInvalidArgument && code != orbit.CodeNotFound {
		t.Errorf("cursor on another queue: %v", err)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Pause and resume each take the revision from a query and a new key; a
// stale revision is STATE_CONFLICT; replaying a key returns its original
// receipt (S-14, S-15).
func TestS14_ConfigurePausesAndResumes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "object-results"})

	current, err := f.client.GetSubscription(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	pause := orbit.ConfigureSubscriptionRequest{ExpectedRevision: current.Revision, Enabled: false, Reason: "receiver maintenance"}
	paused, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", pause)
	if err != nil {
		t.Fatal(err)
	}
	if paused.Deduplicated || paused.Subscription.Enabled || paused.Subscription.Revision != 2 {
		t.Errorf("pause = %+v; want disabled at revision 2", paused)
	}

	current, err = f.client.GetSubscription(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := f.client.ConfigureSubscription(ctx, s.ID, "resume:1", orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: current.Revision, Enabled: true, Reason: "receiver back",
	})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Deduplicated || !resumed.Subscription.Enabled || resumed.Subscription.Revision != 3 {
		t.Errorf("resume = %+v; want enabled at revision 3", resumed)
	}

	// The pause replayed with its original request: the original receipt.
	replay, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", pause)
	if err != nil {
		t.Fatal(err)
	}
	if !replay.Deduplicated || replay.Subscription.Enabled || replay.Subscription.Revision != 2 {
		t.Errorf("replay = %+v; want the pause receipt, deduplicated", replay)
	}
	// The pause key with the newer revision is another request.
	stale := pause
	stale.ExpectedRevision = 3
	if _, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", stale); apiCode(t, err) != orbit.CodeIdempotencyConflict {
		t.Errorf("pause key with another revision: %v; want IDEMPOTENCY_CONFLICT", err)
	}
	// A new key with a stale revision.
	if _, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:2", pause); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("stale revision: %v; want STATE_CONFLICT", err)
	}
	// The same value again is still a change (S-15).
	same, err := f.client.ConfigureSubscription(ctx, s.ID, "resume:2", orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: 3, Enabled: true, Reason: "audit",
	})
	if err != nil || same.Subscription.Revision != 4 {
		t.Errorf("same value: %+v %v; want revision 4", same, err)
	}
}

// A cancelled task's result becomes a PENDING delivery without any
// consumer; the list filters by state and pages; the detail carries the
// event with its snapshot (S-17 … S-20).
func TestS17_DeliveriesOfCancelledTasks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "object-results"})
	first := f.cancelledTask(t, "first")
	second := f.cancelledTask(t, "second")

	d := f.waitDelivery(t, s.ID, second.ID)
	if d.Delivery.SubscriptionID != s.ID || d.Delivery.State != orbit.DeliveryStatePending || d.Delivery.LeaseEpoch != 0 ||
		d.Delivery.LeaseUntil != nil || d.Delivery.AcknowledgedAt != nil || d.Delivery.Attempts != 0 ||
		d.Delivery.AttemptBudget != 20 || d.Delivery.EventID != d.Event.ID || d.Delivery.Sequence != d.Event.Sequence {
		t.Errorf("delivery = %+v", d.Delivery)
	}
	e := d.Event
	if e.Type != orbit.EventTypeTaskCancelled || e.AggregateKind != "task" || e.AggregateID != second.ID ||
		e.AggregateRevision != second.Revision || e.OccurredAt.IsZero() {
		t.Errorf("event = %+v", e)
	}
	snap, err := e.DecodeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.SchemaVersion != 1 || snap.TaskID != second.ID || snap.QueueID != f.queueID || snap.State != orbit.TaskStateCancelled ||
		snap.Revision != second.Revision || snap.EffectUncertain || len(snap.Result) != 0 {
		t.Errorf("snapshot = %+v", snap)
	}
	f.waitDelivery(t, s.ID, first.ID)

	// Two deliveries, newest first, one per page.
	var items []orbit.EventDelivery
	req := orbit.ListEventDeliveriesRequest{Limit: 1, State: orbit.DeliveryStatePending}
	for {
		page, err := f.client.ListEventDeliveries(ctx, s.ID, req)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, page.Items...)
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	if len(items) != 2 || items[0].ID != d.Delivery.ID || items[1].Sequence >= items[0].Sequence {
		t.Errorf("deliveries = %+v; want the second task's first", items)
	}
	acked, err := f.client.ListEventDeliveries(ctx, s.ID, orbit.ListEventDeliveriesRequest{State: orbit.DeliveryStateAcked})
	if err != nil || len(acked.Items) != 0 {
		t.Errorf("ACKED deliveries: %+v %v; want none", acked, err)
	}
	// A cursor is bound to its state filter.
	_, err = f.client.ListEventDeliveries(ctx, s.ID, orbit.ListEventDeliveriesRequest{Limit: 1, Cursor: req.Cursor, State: orbit.DeliveryStateAcked})
	if req.Cursor != "" && apiCode(t, err) != orbit.CodeInvalidArgument {
		t.Errorf("cursor with another state: %v; want INVALID_ARGUMENT", err)
	}

	// The delivery is not visible through another subscription (S-19).
	other := f.createSubscription(t, "create:2", orbit.CreateSubscriptionRequest{Name: "other"})
	if _, err := f.client.GetEventDelivery(ctx, other.ID, d.Delivery.ID); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("delivery through another subscription: %v; want NOT_FOUND", err)
	}
	if _, err := f.client.GetEventDelivery(ctx, s.ID, "0123456789abcdef0123456789abcdef"); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("unknown delivery: %v; want NOT_FOUND", err)
	}
	got, err := f.client.GetSubscription(ctx, s.ID)
	if err != nil || got.PendingCount != 2 || got.Revision != 1 {
		t.Errorf("subscription = %+v %v; want pending_count 2 at revision 1 (S-9)", got, err)
	}
}

// expireDelivery leases a delivery on a session of its own, moves the
// lease's end into the past and recovers it, as a consumer that never
// acknowledged would leave it. With a budget of one attempt the delivery
// becomes EXPIRED.
func (f *fixture) expireDelivery(t *testing.T, subscriptionID, deliveryID string) {
	t.Helper()
	ctx := context.Background()
	session, err := subscriptions.EventSessionOpen(ctx, f.srv.DB, nil, &subscriptions.EventSessionOpenParams{
		SubscriptionID: subscriptionID, CredentialID: f.cred.CredentialID, Capacity: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	grant := auth.Grant{CredentialID: f.cred.CredentialID, Permission: auth.PermEventsConsume, QueueID: f.cred.QueueID, What: "subscription"}
	leases, err := subscriptions.DeliveryClaim(ctx, f.srv.DB, f.srv.Instances["tasks"].(*tasks.Module), f.srv.Authenticator(t), &subscriptions.DeliveryClaimParams{SessionID: session, Grant: grant, LeaseDuration: time.Minute, RecoverBatch: 10})
	if err != nil || len(leases) != 1 || leases[0].Delivery.ID != deliveryID {
		t.Fatalf("claim: %d leases, %v; want delivery %s", len(leases), err, deliveryID)
	}
	if _, err := f.srv.DB.ExecContext(ctx, `UPDATE event_deliveries SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), deliveryID); err != nil {
		t.Fatal(err)
	}
	// The background sweeper may recover it first; either way it ends
	// EXPIRED.
	if _, err := subscriptions.DeliveryRecover(ctx, f.srv.DB, subscriptionID, 10); err != nil {
		t.Fatal(err)
	}
	if err := subscriptions.EventSessionClose(ctx, f.srv.DB, session); err != nil {
		t.Fatal(err)
	}
}

// Retry makes an EXPIRED delivery PENDING with a larger budget, keeping
// attempts, epoch and event; a replay adds nothing; any other state is
// STATE_CONFLICT (S-21).
func TestS21_RetryMakesAnExpiredDeliveryPending(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "object-results", MaxAttempts: 1})
	task := f.cancelledTask(t, "task")
	pending := f.waitDelivery(t, s.ID, task.ID).Delivery

	_, err := f.client.RetryEventDelivery(ctx, s.ID, pending.ID, "retry:pending", orbit.RetryEventDeliveryRequest{
		ExpectedRevision: pending.Revision, Reason: "too early", AdditionalAttempts: 1,
	})
	if code := apiCode(t, err); code != orbit.CodeStateConflict {
		t.Errorf("retry of a PENDING delivery: %v; want STATE_CONFLICT", err)
	}

	f.expireDelivery(t, s.ID, pending.ID)
	expired, err := f.client.GetEventDelivery(ctx, s.ID, pending.ID)
	if err != nil {
		t.Fatal(err)
	}
	e := expired.Delivery
	if e.State != orbit.DeliveryStateExpired || e.Attempts != 1 || e.AttemptBudget != 1 || e.LeaseEpoch != 1 || e.LeaseUntil != nil ||
		e.Revision <= pending.Revision {
		t.Fatalf("after recovery: %+v; want EXPIRED after its one attempt", e)
	}
	list, err := f.client.ListEventDeliveries(ctx, s.ID, orbit.ListEventDeliveriesRequest{State: orbit.DeliveryStateExpired})
	if err != nil || len(list.Items) != 1 || list.Items[0].ID != e.ID {
		t.Errorf("EXPIRED deliveries: %+v %v", list, err)
	}

	stale := orbit.RetryEventDeliveryRequest{ExpectedRevision: pending.Revision, Reason: "repaired", AdditionalAttempts: 2}
	if _, err := f.client.RetryEventDelivery(ctx, s.ID, e.ID, "retry:stale", stale); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("retry with a stale revision: %v; want STATE_CONFLICT", err)
	}

	req := orbit.RetryEventDeliveryRequest{ExpectedRevision: e.Revision, Reason: "receiver persistence failure repaired", AdditionalAttempts: 2}
	res, err := f.client.RetryEventDelivery(ctx, s.ID, e.ID, "retry:1", req)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Delivery
	if res.Deduplicated || r.State != orbit.DeliveryStatePending || r.AttemptBudget != 3 || r.Attempts != 1 || r.LeaseEpoch != 1 ||
		r.Revision != e.Revision+1 || r.EventID != e.EventID || r.ID != e.ID {
		t.Errorf("retry = %+v; want PENDING with budget 3, attempts and epoch kept", res)
	}

	replay, err := f.client.RetryEventDelivery(ctx, s.ID, e.ID, "retry:1", req)
	if err != nil {
		t.Fatal(err)
	}
	if !replay.Deduplicated || replay.Delivery.Revision != r.Revision || replay.Delivery.AttemptBudget != 3 {
		t.Errorf("replay = %+v; want the original receipt", replay)
	}
	req.AdditionalAttempts = 3
	if _, err := f.client.RetryEventDelivery(ctx, s.ID, e.ID, "retry:1", req); apiCode(t, err) != orbit.CodeIdempotencyConflict {
		t.Errorf("retry key with another request: %v; want IDEMPOTENCY_CONFLICT", err)
	}
	now, err := f.client.GetEventDelivery(ctx, s.ID, e.ID)
	if err != nil || now.Delivery.AttemptBudget != 3 || now.Delivery.State != orbit.DeliveryStatePending {
		t.Errorf("after the replay: %+v %v; want budget 3, PENDING", now, err)
	}
	got, err := f.client.GetSubscription(ctx, s.ID)
	if err != nil || got.PendingCount != 1 {
		t.Errorf("subscription = %+v %v; want the backlog slot kept, pending_count 1", got, err)
	}
}

// Every failure reaches the caller as an *orbit.APIError whose Code is the
// server's (S-25, C-7).
func TestS25_ErrorsCarryTheAPICode(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.createSubscription(t, "create:1", orbit.CreateSubscriptionRequest{Name: "object-results"})
	readOnly := newClient(t, f.srv, f.srv.Credential(t, servertest.CredentialParams{Permissions: []string{"events:read"}}).Token)
	unknown := "0123456789abcdef0123456789abcdef"

	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"UnknownSubscription", func() error { _, err := f.client.GetSubscription(ctx, unknown); return err }, orbit.CodeNotFound},
		{"UnknownQueue", func() error {
			_, err := f.client.CreateSubscription(ctx, "create:2", orbit.CreateSubscriptionRequest{Name: "x", QueueID: unknown})
			return err
		}, orbit.CodeNotFound},
		{"StaleRevision", func() error {
			_, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:1", orbit.ConfigureSubscriptionRequest{ExpectedRevision: 9, Reason: "r"})
			return err
		}, orbit.CodeStateConflict},
		{"KeyReusedWithOtherRequest", func() error {
			_, err := f.client.CreateSubscription(ctx, "create:1", orbit.CreateSubscriptionRequest{Name: "renamed", QueueID: f.queueID})
			return err
		}, orbit.CodeIdempotencyConflict},
		{"DuplicateName", func() error {
			_, err := f.client.CreateSubscription(ctx, "create:3", orbit.CreateSubscriptionRequest{Name: "object-results", QueueID: f.queueID})
			return err
		}, orbit.CodeStateConflict},
		{"EmptyReason", func() error {
			_, err := f.client.ConfigureSubscription(ctx, s.ID, "pause:2", orbit.ConfigureSubscriptionRequest{ExpectedRevision: 1})
			return err
		}, orbit.CodeInvalidArgument},
		{"ZeroAdditionalAttempts", func() error {
			_, err := f.client.RetryEventDelivery(ctx, s.ID, unknown, "retry:1", orbit.RetryEventDeliveryRequest{ExpectedRevision: 1, Reason: "r"})
			return err
		}, orbit.CodeInvalidArgument},
		{"RequeuedIsNotAType", func() error {
			_, err := f.client.CreateSubscription(ctx, "create:4", orbit.CreateSubscriptionRequest{Name: "y", QueueID: f.queueID, Types: []string{"task.requeued"}})
			return err
		}, orbit.CodeInvalidArgument},
		{"MissingQueue", func() error { _, err := f.client.ListSubscriptions(ctx, orbit.ListSubscriptionsRequest{}); return err }, orbit.CodeInvalidArgument},
		{"ReadCannotManage", func() error {
			_, err := readOnly.CreateSubscription(ctx, "create:5", orbit.CreateSubscriptionRequest{Name: "z", QueueID: f.queueID})
			return err
		}, orbit.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if code := apiCode(t, err); code != tc.code {
				t.Errorf("err = %v; want %s", err, tc.code)
			}
		})
	}
}
