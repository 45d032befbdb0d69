package subscriptions_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/subscriptions"
)

// TestK4_RetryPolicyOnCreate: a subscription shows its retry_policy, the
// defaults when created without one; create takes one with delays as JSON
// numbers or decimal strings, and refuses one out of bounds.
func TestK4_RetryPolicyOnCreate(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "policy")

	t.Run("Default", func(t *testing.T) {
		s := e.create(t, c, createBody(c.QueueID, "default-policy", ""))
		if s.RetryPolicy != subscriptions.DefaultRetryPolicy {
			t.Fatalf("retry_policy %+v, want %+v", s.RetryPolicy, subscriptions.DefaultRetryPolicy)
		}
	})
	t.Run("Given", func(t *testing.T) {
		s := e.create(t, c, createBody(c.QueueID, "given-policy", `,"retry_policy":{"initial_delay_ms":"250","max_delay_ms":86400000,"multiplier":1.5}`))
		want := subscriptions.RetryPolicy{InitialDelayMS: 250, MaxDelayMS: 86_400_000, Multiplier: 1.5}
		if s.RetryPolicy != want {
			t.Fatalf("retry_policy %+v, want %+v", s.RetryPolicy, want)
		}
		if got := e.subscription(t, c, s.ID).RetryPolicy; got != want {
			t.Fatalf("GET retry_policy %+v, want %+v", got, want)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		for i, policy := range []string{
			`{"initial_delay_ms":1000,"max_delay_ms":600000}`,
			`{"initial_delay_ms":1000,"max_delay_ms":600000,"multiplier":0.5}`,
			`{"initial_delay_ms":1000,"max_delay_ms":600000,"multiplier":10.5}`,
			`{"initial_delay_ms":-1,"max_delay_ms":600000,"multiplier":2}`,
			`{"initial_delay_ms":1000,"max_delay_ms":86400001,"multiplier":2}`,
			`{"initial_delay_ms":"01","max_delay_ms":600000,"multiplier":2}`,
			`{"initial_delay_ms":1.5,"max_delay_ms":600000,"multiplier":2}`,
			`{"initial_delay_ms":2000,"max_delay_ms":1000,"multiplier":2}`,
			`{"initial_delay_ms":1000,"max_delay_ms":600000,"multiplier":"2"}`,
			`{"initial_delay_ms":1000,"max_delay_ms":600000,"multiplier":2,"jitter":true}`,
		} {
			r := e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "bad-policy", `,"retry_policy":`+policy))
			wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
			if i == 1 {
				doctest.Check(t, docPath, "subscriptions-bad-retry-policy-response", r.Body)
			}
		}
	})
}

// TestK4_RetryPolicyOnConfigure: configure changes the retry policy as a
// revisioned change, written to the audit log; a configure without
// retry_policy keeps it.
func TestK4_RetryPolicyOnConfigure(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "configure-policy")
	s := e.create(t, c, createBody(c.QueueID, "configured-policy", ""))
	path := "/v1/subscriptions/" + s.ID + ":configure"
	body := `{
  "expected_revision": "1",
  "enabled": true,
  "reason": "downstream rate limit",
  "retry_policy": {
    "initial_delay_ms": 5000,
    "max_delay_ms": 3600000,
    "multiplier": 3
  }
}`
	r := e.post(t, c, path, newKey(), body)
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-configure-retry-policy-request", []byte(body))
	doctest.Check(t, docPath, "subscriptions-configure-retry-policy-response", r.Body)
	want := subscriptions.RetryPolicy{InitialDelayMS: 5000, MaxDelayMS: 3_600_000, Multiplier: 3}
	if rc := decodeReceipt(t, r); rc.Subscription.Revision != 2 || rc.Subscription.RetryPolicy != want {
		t.Fatalf("receipt %+v; want revision 2 with %+v", rc.Subscription, want)
	}
	var audited int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM audit_log WHERE action = 'subscription.retry_policy' AND subject_id = ?
		AND reason LIKE 'revision 2:%'`, s.ID).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("audit records %d (%v), want 1", audited, err)
	}
	if after := e.configure(t, c, s.ID, false); after.Revision != 3 || after.RetryPolicy != want {
		t.Fatalf("after a configure without retry_policy: %+v; want the policy kept", after)
	}
}

// TestK6_ExpiredReasonFilter: EXPIRED deliveries show expired_reason and
// last_error; the list filters them by expired_reason; a bad value, or the
// filter without state=EXPIRED, is 400; a retry clears expired_reason.
func TestK6_ExpiredReasonFilter(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "dead-letters")
	s := e.create(t, c, createBody(c.QueueID, "dead-letters", `,"max_attempts":1`))
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, s.ID, 2)
	session, exhausted := e.claimOne(t, c, s.ID)
	e.expireLease(t, exhausted.Delivery.ID)
	e.recoverLeases(t, s.ID)
	rejected := e.claimNext(t, session)
	outcomes, err := subscriptions.DeliveryControlBatch(context.Background(), e.srv.DB, e.srv.Authenticator(t), []*subscriptions.DeliveryControlParams{{
		Verb: subscriptions.ControlReject, Grant: e.grant(t, session), SubscriptionID: s.ID, DeliveryID: rejected.Delivery.ID,
		Epoch: rejected.Delivery.LeaseEpoch, Secret: rejected.Secret, Reason: "poison",
	}})
	if err != nil || outcomes[0].Err != nil {
		t.Fatalf("reject: %v %v", err, outcomes)
	}

	list := func(t *testing.T, query string) []subscriptions.DeliveryView {
		t.Helper()
		r := e.get(t, c, "/v1/subscriptions/"+s.ID+"/deliveries"+query)
		wantStatus(t, r, http.StatusOK)
		return decodeDeliveryPage(t, r).Items
	}
	t.Run("Fields", func(t *testing.T) {
		x := e.delivery(t, c, s.ID, exhausted.Delivery.ID)
		if x.ExpiredReason != "ATTEMPTS_EXHAUSTED" || x.LastError != "LEASE_EXPIRED" || x.Nacks != 0 {
			t.Errorf("exhausted %+v", x)
		}
		rj := e.delivery(t, c, s.ID, rejected.Delivery.ID)
		if rj.ExpiredReason != "REJECTED" || rj.LastError != "poison" {
			t.Errorf("rejected %+v", rj)
		}
	})
	t.Run("Filter", func(t *testing.T) {
		if got := list(t, "?state=EXPIRED"); len(got) != 2 {
			t.Errorf("EXPIRED: %d deliveries, want 2", len(got))
		}
		r := e.get(t, c, "/v1/subscriptions/"+s.ID+"/deliveries?state=EXPIRED&expired_reason=REJECTED")
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "subscriptions-dead-letters-response", r.Body)
		if got := decodeDeliveryPage(t, r).Items; len(got) != 1 || got[0].ID != rejected.Delivery.ID {
			t.Errorf("REJECTED: %v, want the rejected delivery", ids(got))
		}
		if got := list(t, "?state=EXPIRED&expired_reason=ATTEMPTS_EXHAUSTED"); len(got) != 1 || got[0].ID != exhausted.Delivery.ID {
			t.Errorf("ATTEMPTS_EXHAUSTED: %v, want the exhausted delivery", ids(got))
		}
		if got := list(t, "?state=EXPIRED&expired_reason=SKIPPED"); len(got) != 0 {
			t.Errorf("SKIPPED: %v, want none", ids(got))
		}
	})
	t.Run("BadFilter", func(t *testing.T) {
		for _, q := range []string{"?state=EXPIRED&expired_reason=rejected", "?state=EXPIRED&expired_reason=", "?expired_reason=REJECTED",
			"?state=PENDING&expired_reason=REJECTED", "?state=EXPIRED&expired_reason=REJECTED&expired_reason=SKIPPED"} {
			wantError(t, e.get(t, c, "/v1/subscriptions/"+s.ID+"/deliveries"+q), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("RetryClearsExpiredReason", func(t *testing.T) {
		cur := e.delivery(t, c, s.ID, rejected.Delivery.ID)
		r := e.post(t, c, "/v1/subscriptions/"+s.ID+"/deliveries/"+rejected.Delivery.ID+":retry", newKey(),
			fmt.Sprintf(`{"expected_revision":"%d","reason":"schema 7 supported now","additional_attempts":1}`, cur.Revision))
		wantStatus(t, r, http.StatusOK)
		d := e.delivery(t, c, s.ID, rejected.Delivery.ID)
		if d.State != "PENDING" || d.ExpiredReason != "" || d.LastError != "poison" {
			t.Errorf("retried %+v; want PENDING without expired_reason, last_error kept", d)
		}
		if got := list(t, "?state=EXPIRED&expired_reason=REJECTED"); len(got) != 0 {
			t.Errorf("REJECTED after the retry: %v", ids(got))
		}
	})
}
