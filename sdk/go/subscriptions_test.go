package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

const (
	testSubscriptionID = "22222222222222222222222222222222"
	testDeliveryID     = "33333333333333333333333333333333"
	testEventID        = "55555555555555555555555555555555"
)

// subscriptionJSON is the subscription of the seed's create example.
const subscriptionJSON = `{
	"id": "22222222222222222222222222222222",
	"queue_id": "11111111111111111111111111111111",
	"credential_id": "88888888888888888888888888888888",
	"name": "object-results",
	"revision": "1",
	"enabled": true,
	"types": ["task.cancelled", "task.failed", "task.needs_review", "task.succeeded"],
	"cursor_sequence": "12",
	"pending_count": 0,
	"max_pending": 100,
	"max_attempts": 20,
	"created_at": "2026-09-17T10:00:00Z",
	"updated_at": "2026-09-17T10:00:00Z"
}`

// deliveryJSON and eventJSON are the delivery and event of the seed's
// event.deliver example; the snapshot carries a result with a number that
// float64 cannot hold.
const (
	deliveryJSON = `{
		"created_at": "2026-09-17T10:00:00Z",
		"id": "33333333333333333333333333333333",
		"subscription_id": "22222222222222222222222222222222",
		"event_id": "55555555555555555555555555555555",
		"sequence": "13",
		"revision": "2",
		"state": "LEASED",
		"available_at": "2026-09-17T10:00:00Z",
		"lease_epoch": "1",
		"lease_until": "2026-09-17T10:00:30Z",
		"attempts": 1,
		"attempt_budget": 20
	}`
	eventJSON = `{
		"id": "55555555555555555555555555555555",
		"sequence": "13",
		"type": "task.cancelled",
		"aggregate_kind": "task",
		"aggregate_id": "66666666666666666666666666666666",
		"aggregate_revision": "2",
		"occurred_at": "2026-09-17T10:00:00Z",
		"details": {"state": "CANCELLED", "reason": "CANCEL_REQUESTED"},
		"snapshot": {
			"schema_version": 1,
			"task_id": "66666666666666666666666666666666",
			"queue_id": "11111111111111111111111111111111",
			"state": "CANCELLED",
			"revision": "2",
			"effect_uncertain": false,
			"result": {"amount": 12345678901234567890123},
			"current_attempt_id": "77777777777777777777777777777777"
		}
	}`
)

func TestCreateSubscriptionSendsOnlySetFields(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusCreated, dataBody(`{"subscription":`+subscriptionJSON+`,"deduplicated":false}`))
	res, err := c.CreateSubscription(context.Background(), "create:1", CreateSubscriptionRequest{
		Name: "object-results", QueueID: testQueueID, MaxPending: 100, MaxAttempts: 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.method != http.MethodPost || req.path != "/v1/subscriptions" || req.rawQuery != "" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	if req.header.Get("Idempotency-Key") != "create:1" || req.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v", req.header)
	}
	body := jsonKeys(t, req.body)
	if len(body) != 4 || string(body["name"]) != `"object-results"` || string(body["queue_id"]) != `"`+testQueueID+`"` ||
		string(body["max_pending"]) != "100" || string(body["max_attempts"]) != "20" {
		t.Errorf("body = %s; want name, queue_id, max_pending and max_attempts only", req.body)
	}
	s := res.Subscription
	want := Subscription{
		ID: testSubscriptionID, QueueID: testQueueID, CredentialID: "88888888888888888888888888888888",
		Name: "object-results", Revision: 1, Enabled: true,
		Types:          []string{EventTypeTaskCancelled, EventTypeTaskFailed, EventTypeTaskNeedsReview, EventTypeTaskSucceeded},
		CursorSequence: 12, PendingCount: 0, MaxPending: 100, MaxAttempts: 20,
		CreatedAt: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC),
	}
	if res.Deduplicated || s.ID != want.ID || s.QueueID != want.QueueID || s.CredentialID != want.CredentialID ||
		s.Name != want.Name || s.Revision != want.Revision || s.Enabled != want.Enabled || !slices.Equal(s.Types, want.Types) ||
		s.CursorSequence != want.CursorSequence || s.PendingCount != want.PendingCount || s.MaxPending != want.MaxPending ||
		s.MaxAttempts != want.MaxAttempts || !s.CreatedAt.Equal(want.CreatedAt) || !s.UpdatedAt.Equal(want.UpdatedAt) {
		t.Errorf("receipt = %+v, deduplicated %t; want %+v", s, res.Deduplicated, want)
	}
}

func TestCreateSubscriptionSendsFromSequenceAsDecimalString(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"subscription":`+subscriptionJSON+`,"deduplicated":true}`))
	for _, from := range []uint64{0, 18446744073709551615} {
		res, err := c.CreateSubscription(context.Background(), "create:2", CreateSubscriptionRequest{
			Name: "n", QueueID: testQueueID, Types: []string{EventTypeTaskSucceeded}, FromSequence: &from,
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Deduplicated {
			t.Error("Deduplicated = false")
		}
		body := jsonKeys(t, (<-reqs).body)
		if string(body["from_sequence"]) != `"`+jsonUint(from)+`"` || string(body["types"]) != `["task.succeeded"]` || len(body) != 4 {
			t.Errorf("from %d: body = %v", from, body)
		}
	}
}

func jsonUint(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestListSubscriptionsSendsQueryAndDecodesPage(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"items":[`+subscriptionJSON+`],"next_cursor":"c2"}`))
	page, err := c.ListSubscriptions(context.Background(), ListSubscriptionsRequest{QueueID: testQueueID, Limit: 1, Cursor: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	q, _ := url.ParseQuery(req.rawQuery)
	if req.method != http.MethodGet || req.path != "/v1/subscriptions" || len(q) != 3 ||
		q.Get("queue_id") != testQueueID || q.Get("limit") != "1" || q.Get("cursor") != "c1" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	if req.header.Get("Idempotency-Key") != "" || len(req.body) != 0 {
		t.Errorf("a read sent a key or a body: %v %q", req.header, req.body)
	}
	if len(page.Items) != 1 || page.Items[0].CursorSequence != 12 || page.NextCursor != "c2" {
		t.Errorf("page = %+v", page)
	}
	if _, err := c.ListSubscriptions(context.Background(), ListSubscriptionsRequest{QueueID: testQueueID}); err != nil {
		t.Fatal(err)
	}
	if q := (<-reqs).rawQuery; q != "queue_id="+testQueueID {
		t.Errorf("query = %q; want queue_id only", q)
	}
}

func TestGetSubscription(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(subscriptionJSON))
	s, err := c.GetSubscription(context.Background(), testSubscriptionID)
	if err != nil {
		t.Fatal(err)
	}
	if req := <-reqs; req.method != http.MethodGet || req.path != "/v1/subscriptions/"+testSubscriptionID || req.rawQuery != "" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	if s.ID != testSubscriptionID || s.Revision != 1 || !s.Enabled {
		t.Errorf("subscription = %+v", s)
	}
}

func TestConfigureSubscriptionSendsAllThreeFields(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"subscription":`+subscriptionJSON+`,"deduplicated":false}`))
	for _, tc := range []struct {
		req  ConfigureSubscriptionRequest
		want string
	}{
		{ConfigureSubscriptionRequest{ExpectedRevision: 1, Enabled: false, Reason: "receiver maintenance"},
			`{"expected_revision":"1","enabled":false,"reason":"receiver maintenance"}`},
		{ConfigureSubscriptionRequest{ExpectedRevision: 18446744073709551615, Enabled: true},
			`{"expected_revision":"18446744073709551615","enabled":true,"reason":""}`},
	} {
		if _, err := c.ConfigureSubscription(context.Background(), testSubscriptionID, "pause:1", tc.req); err != nil {
			t.Fatal(err)
		}
		req := <-reqs
		if req.method != http.MethodPost || req.path != "/v1/subscriptions/"+testSubscriptionID+":configure" ||
			req.header.Get("Idempotency-Key") != "pause:1" {
			t.Errorf("request = %s %s, key %q", req.method, req.path, req.header.Get("Idempotency-Key"))
		}
		if string(req.body) != tc.want {
			t.Errorf("body = %s, want %s", req.body, tc.want)
		}
	}
}

func TestListEventDeliveriesSendsQueryAndDecodesPage(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"items":[`+deliveryJSON+`]}`))
	page, err := c.ListEventDeliveries(context.Background(), testSubscriptionID, ListEventDeliveriesRequest{
		Limit: 5, Cursor: "c1", State: DeliveryStateLeased,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	q, _ := url.ParseQuery(req.rawQuery)
	if req.method != http.MethodGet || req.path != "/v1/subscriptions/"+testSubscriptionID+"/deliveries" || len(q) != 3 ||
		q.Get("limit") != "5" || q.Get("cursor") != "c1" || q.Get("state") != "LEASED" {
		t.Errorf("request = %s %s?%s", req.method, req.path, req.rawQuery)
	}
	if len(page.Items) != 1 || page.NextCursor != "" || page.Items[0].State != DeliveryStateLeased {
		t.Errorf("page = %+v", page)
	}
	if _, err := c.ListEventDeliveries(context.Background(), testSubscriptionID, ListEventDeliveriesRequest{}); err != nil {
		t.Fatal(err)
	}
	if q := (<-reqs).rawQuery; q != "" {
		t.Errorf("query = %q; want none", q)
	}
}

func TestGetEventDeliveryDecodesTheSeedExample(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"delivery":`+deliveryJSON+`,"event":`+eventJSON+`}`))
	got, err := c.GetEventDelivery(context.Background(), testSubscriptionID, testDeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	if req := <-reqs; req.method != http.MethodGet || req.path != "/v1/subscriptions/"+testSubscriptionID+"/deliveries/"+testDeliveryID {
		t.Errorf("request = %s %s", req.method, req.path)
	}
	d := got.Delivery
	at := time.Date(2026, 9, 17, 10, 0, 0, 0, time.UTC)
	if d.ID != testDeliveryID || d.SubscriptionID != testSubscriptionID || d.EventID != testEventID ||
		d.Sequence != 13 || d.Revision != 2 || d.State != DeliveryStateLeased || !d.CreatedAt.Equal(at) ||
		!d.AvailableAt.Equal(at) || d.LeaseEpoch != 1 || d.LeaseUntil == nil || !d.LeaseUntil.Equal(at.Add(30*time.Second)) ||
		d.Attempts != 1 || d.AttemptBudget != 20 || d.AcknowledgedAt != nil {
		t.Errorf("delivery = %+v", d)
	}
	e := got.Event
	if e.ID != testEventID || e.Sequence != 13 || e.Type != EventTypeTaskCancelled || e.AggregateKind != "task" ||
		e.AggregateID != testTaskID || e.AggregateRevision != 2 || !e.OccurredAt.Equal(at) {
		t.Errorf("event = %+v", e)
	}
	var details struct{ State, Reason string }
	if err := json.Unmarshal(e.Details, &details); err != nil || details.State != TaskStateCancelled || details.Reason != "CANCEL_REQUESTED" {
		t.Errorf("details = %s (%v)", e.Details, err)
	}
	s, err := e.DecodeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.SchemaVersion != 1 || s.TaskID != testTaskID || s.QueueID != testQueueID || s.State != TaskStateCancelled ||
		s.Revision != 2 || s.EffectUncertain || s.CurrentAttemptID != "77777777777777777777777777777777" {
		t.Errorf("snapshot = %+v", s)
	}
	if string(s.Result) != `{"amount": 12345678901234567890123}` {
		t.Errorf("result = %s; the big integer must keep its text", s.Result)
	}
}

func TestDecodeSnapshotReportsAMissingOrMalformedSnapshot(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", "null", `{"revision":2}`} {
		if _, err := (ResultEvent{ID: testEventID, Snapshot: json.RawMessage(raw)}).DecodeSnapshot(); err == nil {
			t.Errorf("snapshot %q decoded without an error", raw)
		}
	}
}

func TestRetryEventDeliverySendsAllThreeFields(t *testing.T) {
	t.Parallel()
	pending := `{"created_at":"2026-09-17T10:00:00Z","id":"` + testDeliveryID + `","subscription_id":"` + testSubscriptionID +
		`","event_id":"` + testEventID + `","sequence":"13","revision":"4","state":"PENDING","available_at":"2026-09-17T10:01:00Z",` +
		`"lease_epoch":"1","attempts":1,"attempt_budget":3}`
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{"delivery":`+pending+`,"deduplicated":false}`))
	res, err := c.RetryEventDelivery(context.Background(), testSubscriptionID, testDeliveryID, "retry:1", RetryEventDeliveryRequest{
		ExpectedRevision: 3, Reason: "receiver persistence failure repaired", AdditionalAttempts: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.method != http.MethodPost || req.path != "/v1/subscriptions/"+testSubscriptionID+"/deliveries/"+testDeliveryID+":retry" ||
		req.header.Get("Idempotency-Key") != "retry:1" {
		t.Errorf("request = %s %s, key %q", req.method, req.path, req.header.Get("Idempotency-Key"))
	}
	if want := `{"expected_revision":"3","reason":"receiver persistence failure repaired","additional_attempts":2}`; string(req.body) != want {
		t.Errorf("body = %s, want %s", req.body, want)
	}
	d := res.Delivery
	if res.Deduplicated || d.State != DeliveryStatePending || d.Revision != 4 || d.AttemptBudget != 3 || d.LeaseUntil != nil || d.AcknowledgedAt != nil {
		t.Errorf("receipt = %+v", res)
	}
}

func TestSubscriptionWritesRequireAKeyAndReadsAnID(t *testing.T) {
	t.Parallel()
	c, reqs := setupAPI(t, http.StatusOK, dataBody(`{}`))
	ctx := context.Background()
	calls := map[string]func() error{
		"CreateSubscription without key": func() error {
			_, err := c.CreateSubscription(ctx, "", CreateSubscriptionRequest{Name: "n", QueueID: testQueueID})
			return err
		},
		"ConfigureSubscription without key": func() error {
			_, err := c.ConfigureSubscription(ctx, testSubscriptionID, "", ConfigureSubscriptionRequest{})
			return err
		},
		"RetryEventDelivery without key": func() error {
			_, err := c.RetryEventDelivery(ctx, testSubscriptionID, testDeliveryID, "", RetryEventDeliveryRequest{})
			return err
		},
		"GetSubscription without id": func() error {
			_, err := c.GetSubscription(ctx, "")
			return err
		},
		"ConfigureSubscription without id": func() error {
			_, err := c.ConfigureSubscription(ctx, "", "k", ConfigureSubscriptionRequest{})
			return err
		},
		"ListEventDeliveries without id": func() error {
			_, err := c.ListEventDeliveries(ctx, "", ListEventDeliveriesRequest{})
			return err
		},
		"GetEventDelivery without delivery id": func() error {
			_, err := c.GetEventDelivery(ctx, testSubscriptionID, "")
			return err
		},
		"RetryEventDelivery without subscription id": func() error {
			_, err := c.RetryEventDelivery(ctx, "", testDeliveryID, "k", RetryEventDeliveryRequest{})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		var apiErr *APIError
		if err == nil || errors.As(err, &apiErr) {
			t.Errorf("%s: err = %v; want a local error", name, err)
		}
	}
	if len(reqs) != 0 {
		t.Errorf("%d requests were sent", len(reqs))
	}
}

func TestSubscriptionErrorsCarryTheCode(t *testing.T) {
	t.Parallel()
	c, _ := setupAPI(t, http.StatusConflict,
		`{"request_id":"`+testReqID+`","error":{"code":"STATE_CONFLICT","message":"only an EXPIRED delivery can be retried"}}`)
	_, err := c.RetryEventDelivery(context.Background(), testSubscriptionID, testDeliveryID, "retry:1", RetryEventDeliveryRequest{
		ExpectedRevision: 1, Reason: "r", AdditionalAttempts: 1,
	})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != CodeStateConflict || apiErr.Status != http.StatusConflict || apiErr.RequestID != testReqID {
		t.Fatalf("err = %#v; want STATE_CONFLICT with status 409", err)
	}
}

func TestSubscriptionRejectsCountersSentAsNumbers(t *testing.T) {
	t.Parallel()
	c, _ := setupAPI(t, http.StatusOK, dataBody(`{"id":"`+testSubscriptionID+`","revision":1}`))
	_, err := c.GetSubscription(context.Background(), testSubscriptionID)
	var apiErr *APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("err = %v; want a decoding error for a revision sent as a number", err)
	}
}
