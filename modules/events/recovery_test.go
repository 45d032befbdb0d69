package events_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
)

// TestK11_DeletedSubscriptionClosesConsumers: deleting a subscription
// sends its connected consumers an error SUBSCRIPTION_DELETED and closes
// them with 1000; a new hello on it is NOT_FOUND.
func TestK11_DeletedSubscriptionClosesConsumers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cred := e.ownQueue(t)
	sub := e.subscribe(t, cred, subscriptionParams{})
	a := e.connect(t, cred, sub, 1)
	b := e.connect(t, cred, sub, 1)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodDelete, Path: "/v1/subscriptions/" + sub, Token: cred.Token,
		IdempotencyKey: newKey(), Body: `{"expected_revision":"1","reason":"retired"}`})
	if r.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	for _, c := range []*consumer{a, b} {
		f := c.Next()
		wantError(t, f, "SUBSCRIPTION_DELETED")
		if f.ReplyTo != "" || f.SessionID != c.session {
			t.Errorf("error frame %s", f)
		}
		c.ExpectClose(1000)
	}
	late := e.dial(t, cred)
	hello := late.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
	late.SendFrame(hello)
	wantError(t, late.Reply(hello.MessageID), "NOT_FOUND")
}

// TestK12_WelcomeCarriesTheRedeliveryHorizon: the welcome's
// redelivery_horizon is the queue's retention mark, like the
// subscription's.
func TestK12_WelcomeCarriesTheRedeliveryHorizon(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cred := e.ownQueue(t)
	sub := e.subscribe(t, cred, subscriptionParams{})
	horizon := func(c *consumer) string {
		var body struct {
			RedeliveryHorizon string `json:"redelivery_horizon"`
		}
		decode(t, c.welcome, &body)
		return body.RedeliveryHorizon
	}
	if h := horizon(e.connect(t, cred, sub, 1)); h != "1" {
		t.Errorf("redelivery_horizon %q of an empty log, want \"1\"", h)
	}
	e.results(t, cred, 3)
	if _, err := e.srv.DB.ExecContext(context.Background(), `UPDATE queue_streams SET retention_mark = 3 WHERE queue_id = ?`, cred.QueueID); err != nil {
		t.Fatal(err)
	}
	if h := horizon(e.connect(t, cred, sub, 1)); h != fmt.Sprint(3) {
		t.Errorf("redelivery_horizon %q, want \"3\"", h)
	}
}
