package events_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/events"
)

// Frame types of consumer control (K-1 … K-3).
const (
	typeExtend = "event.extend"
	typeNack   = "event.nack"
	typeReject = "event.reject"
)

// controlTypes are the client frames of consumer control.
var controlTypes = []string{typeExtend, typeNack, typeReject}

// extendBody is the body of event.extend.
type extendBody struct {
	proof
	ExtendMS int64 `json:"extend_ms,omitempty"`
}

// nackBody is the body of event.nack.
type nackBody struct {
	proof
	DelayMS *int64 `json:"delay_ms,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// rejectBody is the body of event.reject.
type rejectBody struct {
	proof
	Reason string `json:"reason"`
}

// controlReply is the body of the ack of event.extend, event.nack or
// event.reject.
type controlReply struct {
	DeliveryID    string `json:"delivery_id"`
	EventID       string `json:"event_id"`
	Epoch         string `json:"epoch"`
	State         string `json:"state"`
	LeaseUntil    string `json:"lease_until"`
	AvailableAt   string `json:"available_at"`
	ExpiredReason string `json:"expired_reason"`
}

func delayMS(ms int64) *int64 { return &ms }

// wantControlReply checks that f is an ack and returns its body.
func wantControlReply(t testing.TB, f *wstest.Frame) controlReply {
	t.Helper()
	if f.Type != typeReply {
		t.Fatalf("answer %s, want ack", f)
	}
	var r controlReply
	decode(t, f, &r)
	return r
}

// controlRow is what consumer control changes of a delivery row.
type controlRow struct {
	State         string
	AvailableAt   time.Time
	LeaseUntil    *time.Time
	Epoch         uint64
	Attempts      int
	Nacks         int
	ExpiredReason string
	LastError     string
	Digest        []byte
}

// controlRow reads the delivery id from the database.
func (e *env) controlRow(t testing.TB, id string) controlRow {
	t.Helper()
	var r controlRow
	var reason, lastErr *string
	err := e.srv.DB.QueryRow(`SELECT state, available_at, lease_until, lease_epoch, attempts, nacks, expired_reason, last_error,
		lease_secret_digest FROM event_deliveries WHERE id = ?`, id).
		Scan(&r.State, &r.AvailableAt, &r.LeaseUntil, &r.Epoch, &r.Attempts, &r.Nacks, &reason, &lastErr, &r.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if reason != nil {
		r.ExpiredReason = *reason
	}
	if lastErr != nil {
		r.LastError = *lastErr
	}
	return r
}

// subscribeWithPolicy creates a subscription of cred with a retry policy.
func (e *env) subscribeWithPolicy(t testing.TB, cred servertest.Credential, maxAttempts int, policy string) string {
	t.Helper()
	body := fmt.Sprintf(`{"name":"p-%d","queue_id":%q,"max_attempts":%d,"retry_policy":%s}`, time.Now().UnixNano(), cred.QueueID, maxAttempts, policy)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions", Token: cred.Token, IdempotencyKey: newKey(), Body: body})
	if r.Status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", r.Status, r.Body)
	}
	var receipt struct {
		Subscription struct {
			ID string `json:"id"`
		} `json:"subscription"`
	}
	if err := json.Unmarshal(r.Data, &receipt); err != nil {
		t.Fatal(err)
	}
	return receipt.Subscription.ID
}

// TestK1_ExtendLease: event.extend moves lease_until to now + extend_ms
// (default: the lease duration), never shortens it, keeps the epoch,
// attempts and secret, and the extended lease still ACKs.
func TestK1_ExtendLease(t *testing.T) {
	t.Parallel()
	e := setup(t, eventsConfig(func(c *events.Config) { c.MaxLeaseExtension = time.Hour }))
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	before := e.controlRow(t, d.Delivery.ID)

	ext := c.NewFrame(typeExtend, extendBody{proof: d.proof(), ExtendMS: 120_000})
	c.SendFrame(ext)
	reply := c.Reply(ext.MessageID)
	r := wantControlReply(t, reply)
	doctest.Check(t, docPath, "events-extend", ext.Raw)
	doctest.Check(t, docPath, "events-extend-reply", reply.Raw)
	until := parseTime(t, r.LeaseUntil)
	if d := time.Until(until); d < 100*time.Second || d > 121*time.Second {
		t.Fatalf("lease_until %s is %v away, want about 120 s", r.LeaseUntil, d)
	}
	after := e.controlRow(t, d.Delivery.ID)
	if !after.LeaseUntil.Equal(until) || after.Epoch != before.Epoch || after.Attempts != before.Attempts ||
		string(after.Digest) != string(before.Digest) || after.State != "LEASED" || r.State != "LEASED" || r.Epoch != "1" {
		t.Fatalf("after extend: row %+v, reply %+v; want the same lease until %s", after, r, until)
	}

	t.Run("NeverShortens", func(t *testing.T) {
		r := wantControlReply(t, c.Request(typeExtend, extendBody{proof: d.proof(), ExtendMS: 1000}))
		if !parseTime(t, r.LeaseUntil).Equal(until) {
			t.Fatalf("lease_until %s, want the longer %s kept", r.LeaseUntil, until)
		}
	})
	t.Run("DefaultIsLeaseDuration", func(t *testing.T) {
		r := wantControlReply(t, c.Request(typeExtend, d.proof()))
		if !parseTime(t, r.LeaseUntil).Equal(until) {
			t.Fatalf("lease_until %s, want %s kept (30 s is shorter)", r.LeaseUntil, until)
		}
	})
	t.Run("AboveMaximum", func(t *testing.T) {
		wantError(t, c.Request(typeExtend, extendBody{proof: d.proof(), ExtendMS: time.Hour.Milliseconds() + 1}), "INVALID_ARGUMENT")
		zero := c.NewFrame(typeExtend, map[string]any{"delivery_id": d.Delivery.ID, "epoch": "1", "lease_secret": d.LeaseSecret, "extend_ms": 0})
		wantError(t, c.Reply(c.SendInvalid(zero)), "INVALID_ARGUMENT")
	})
	t.Run("StillAcks", func(t *testing.T) {
		if res := c.acked(t, d.proof()); res.Deduplicated {
			t.Fatalf("ack after extend: %+v", res)
		}
	})
}

// TestK1_ExpiredLeaseCannotBeRevived: once lease_until has passed, an
// extension is DELIVERY_LEASE_LOST, before and after the recovery, and the
// connection stays open.
func TestK1_ExpiredLeaseCannotBeRevived(t *testing.T) {
	t.Parallel()
	e := setup(t, eventsConfig(func(c *events.Config) { c.LeaseDuration = shortLease }))
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	e.configure(t, e.cred, sub, false)
	time.Sleep(time.Until(parseTime(t, d.Delivery.LeaseUntil)) + 50*time.Millisecond)
	wantError(t, c.Request(typeExtend, d.proof()), "DELIVERY_LEASE_LOST")
	e.waitDeliveryState(t, d.Delivery.ID, "PENDING")
	wantError(t, c.Request(typeExtend, d.proof()), "DELIVERY_LEASE_LOST")
	if row := e.controlRow(t, d.Delivery.ID); row.State != "PENDING" || row.LeaseUntil != nil {
		t.Fatalf("after refused extensions: %+v", row)
	}
	wantPingReply(t, c.ping(t))
}

// TestK2_NackRedelivers: event.nack ends the lease at once; with delay_ms 0
// the delivery comes again at once with a new epoch, nacks and last_error
// recorded; with a delay it waits; and the NACKed proof can no longer ACK.
func TestK2_NackRedelivers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)

	nack := c.NewFrame(typeNack, nackBody{proof: d.proof(), DelayMS: delayMS(0), Reason: "database unavailable"})
	c.SendFrame(nack)
	reply := c.Reply(nack.MessageID)
	r := wantControlReply(t, reply)
	doctest.Check(t, docPath, "events-nack", nack.Raw)
	doctest.Check(t, docPath, "events-nack-reply", reply.Raw)
	if r.State != "PENDING" || r.AvailableAt == "" {
		t.Fatalf("nack reply %+v, want PENDING with available_at", r)
	}
	again := c.deliver(t)
	if again.Delivery.ID != d.Delivery.ID || again.Delivery.LeaseEpoch != "2" || again.Delivery.Attempts != 2 {
		t.Fatalf("redelivery %+v, want the same delivery at epoch 2, attempt 2", again.Delivery)
	}
	row := e.controlRow(t, d.Delivery.ID)
	if row.Nacks != 1 || row.LastError != "database unavailable" {
		t.Fatalf("row %+v, want nacks 1 and the reason as last_error", row)
	}

	t.Run("AckAfterNackIsLeaseLost", func(t *testing.T) {
		wantError(t, c.ack(t, d.proof()), "DELIVERY_LEASE_LOST")
	})
	t.Run("WithDelay", func(t *testing.T) {
		start := time.Now()
		r := wantControlReply(t, c.Request(typeNack, nackBody{proof: again.proof(), DelayMS: delayMS(60_000)}))
		available := parseTime(t, r.AvailableAt)
		if d := available.Sub(start); d < 59*time.Second || d > 61*time.Second {
			t.Fatalf("available_at %s is %v after the NACK, want 60 s", r.AvailableAt, d)
		}
		if f, err := c.TryWait(quiet, func(f *wstest.Frame) bool { return f.Type == typeDeliver }); err == nil {
			t.Fatalf("delivered during the delay: %s", f)
		}
		if row := e.controlRow(t, d.Delivery.ID); row.Nacks != 2 || row.LastError != "" {
			t.Fatalf("row %+v, want nacks 2 and no last_error (the NACK gave no reason)", row)
		}
	})
}

// TestK2_NackLastAttemptExpires: a NACK of the last attempt makes the
// delivery EXPIRED with expired_reason ATTEMPTS_EXHAUSTED.
func TestK2_NackLastAttemptExpires(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{MaxAttempts: 1})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	r := wantControlReply(t, c.Request(typeNack, nackBody{proof: d.proof(), Reason: "still failing"}))
	if r.State != "EXPIRED" || r.ExpiredReason != "ATTEMPTS_EXHAUSTED" {
		t.Fatalf("reply %+v, want EXPIRED ATTEMPTS_EXHAUSTED", r)
	}
	view, _ := e.deliveryDetail(t, e.cred, sub, d.Delivery.ID)
	if view.State != "EXPIRED" {
		t.Fatalf("delivery %+v", view)
	}
	c.ExpectNone(quiet)
}

// TestK2_NackValidation: bad delay_ms and reason are INVALID_ARGUMENT and
// change nothing.
func TestK2_NackValidation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	for name, tt := range map[string]struct {
		body        any
		schemaValid bool
	}{
		"NegativeDelay": {map[string]any{"delivery_id": d.Delivery.ID, "epoch": "1", "lease_secret": d.LeaseSecret, "delay_ms": -1}, false},
		"DelayTooLong":  {nackBody{proof: d.proof(), DelayMS: delayMS(86_400_001)}, false},
		// 257 characters, 514 bytes: the schema counts characters, the
		// server bytes.
		"LongReason":  {nackBody{proof: d.proof(), Reason: strings.Repeat("é", 257)}, true},
		"ControlChar": {nackBody{proof: d.proof(), Reason: "line\nbreak"}, true},
	} {
		f := c.NewFrame(typeNack, tt.body)
		if tt.schemaValid {
			c.SendFrame(f)
		} else {
			c.SendInvalid(f)
		}
		if f := c.Reply(f.MessageID); f.Type != typeError || f.Error.Code != "INVALID_ARGUMENT" {
			t.Errorf("%s: %s, want INVALID_ARGUMENT", name, f)
		}
	}
	if row := e.controlRow(t, d.Delivery.ID); row.State != "LEASED" || row.Nacks != 0 {
		t.Fatalf("row %+v after refused NACKs", row)
	}
}

// TestK3_RejectDeadLetters: event.reject makes the delivery EXPIRED
// REJECTED at once whatever its budget, keeps the reason as last_error,
// frees the slot; only a retry brings it back, and the retry clears
// expired_reason.
func TestK3_RejectDeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)

	t.Run("ReasonRequired", func(t *testing.T) {
		wantError(t, c.Reply(c.SendInvalid(c.NewFrame(typeReject, d.proof()))), "INVALID_ARGUMENT")
		wantError(t, c.Reply(c.SendInvalid(c.NewFrame(typeReject, rejectBody{proof: d.proof()}))), "INVALID_ARGUMENT")
	})
	reject := c.NewFrame(typeReject, rejectBody{proof: d.proof(), Reason: "unknown schema version 7"})
	c.SendFrame(reject)
	reply := c.Reply(reject.MessageID)
	r := wantControlReply(t, reply)
	doctest.Check(t, docPath, "events-reject", reject.Raw)
	doctest.Check(t, docPath, "events-reject-reply", reply.Raw)
	if r.State != "EXPIRED" || r.ExpiredReason != "REJECTED" {
		t.Fatalf("reply %+v", r)
	}
	row := e.controlRow(t, d.Delivery.ID)
	if row.State != "EXPIRED" || row.ExpiredReason != "REJECTED" || row.LastError != "unknown schema version 7" || row.Attempts != 1 {
		t.Fatalf("row %+v", row)
	}
	c.ExpectNone(quiet)
	wantError(t, c.ack(t, d.proof()), "DELIVERY_LEASE_LOST")

	retried := e.retry(t, e.cred, sub, d.Delivery.ID)
	if retried.State != "PENDING" {
		t.Fatalf("retried %+v", retried)
	}
	if row := e.controlRow(t, d.Delivery.ID); row.ExpiredReason != "" || row.LastError != "unknown schema version 7" {
		t.Fatalf("after retry: %+v; want expired_reason cleared, last_error kept", row)
	}
	if again := c.deliver(t); again.Delivery.ID != d.Delivery.ID || again.Delivery.LeaseEpoch != "2" {
		t.Fatalf("after retry: %+v", again.Delivery)
	}
}

// TestK4_RetryPolicyDelays: a NACK without delay_ms waits per the
// subscription's retry policy, and so does a lease that ran out (counted
// from its lease_until), which also records last_error LEASE_EXPIRED.
func TestK4_RetryPolicyDelays(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())
	const policy = `{"initial_delay_ms":2000,"max_delay_ms":3000,"multiplier":10}`

	t.Run("Nack", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribeWithPolicy(t, cred, 5, policy)
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := c.deliver(t)
		start := time.Now()
		r := wantControlReply(t, c.Request(typeNack, nackBody{proof: d.proof(), Reason: "boom"}))
		// Attempt 1: up to 2000 ms, full jitter.
		if d := parseTime(t, r.AvailableAt).Sub(start); d < -time.Second || d > 2100*time.Millisecond {
			t.Fatalf("available_at %s is %v after the NACK, want 0 to 2 s", r.AvailableAt, d)
		}
		again := c.deliver(t)
		r = wantControlReply(t, c.Request(typeNack, nackBody{proof: again.proof()}))
		// Attempt 2: min(3000, 2000 × 10) = 3000 ms at most.
		if d := time.Until(parseTime(t, r.AvailableAt)); d > 3100*time.Millisecond {
			t.Fatalf("second available_at %s is %v away, want at most 3 s", r.AvailableAt, d)
		}
	})
	t.Run("LeaseExpiry", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribeWithPolicy(t, cred, 5, policy)
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := c.deliver(t)
		e.configure(t, cred, sub, false)
		e.waitDeliveryState(t, d.Delivery.ID, "PENDING")
		row := e.controlRow(t, d.Delivery.ID)
		until := parseTime(t, d.Delivery.LeaseUntil)
		if row.AvailableAt.Before(until) || row.AvailableAt.After(until.Add(2100*time.Millisecond)) || row.LastError != "LEASE_EXPIRED" {
			t.Fatalf("recovered %+v; want available_at within 2 s after lease_until %s and last_error LEASE_EXPIRED", row, until)
		}
	})
	t.Run("LeaseExpiryExhausted", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{MaxAttempts: 1})
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := c.deliver(t)
		e.waitDeliveryState(t, d.Delivery.ID, "EXPIRED")
		if row := e.controlRow(t, d.Delivery.ID); row.ExpiredReason != "ATTEMPTS_EXHAUSTED" || row.LastError != "LEASE_EXPIRED" {
			t.Fatalf("expired %+v", row)
		}
	})
}

// TestK5_NackFreesCapacity: a NACKed delivery frees the connection's slot
// at once: the next delivery comes while the NACKed one waits for its
// delay, long before its lease would have run out.
func TestK5_NackFreesCapacity(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.results(t, e.cred, 2)
	first := c.deliver(t)
	c.ExpectNone(quiet)
	wantControlReply(t, c.Request(typeNack, nackBody{proof: first.proof(), DelayMS: delayMS(60_000)}))
	second := c.deliver(t)
	if second.Delivery.ID == first.Delivery.ID {
		t.Fatal("the delayed delivery came again")
	}
	// The rejected slot frees as well.
	wantControlReply(t, c.Request(typeReject, rejectBody{proof: second.proof(), Reason: "poison"}))
	c.ExpectNone(quiet)
}

// TestK6_DeliveryShowsControl: the HTTP delivery shows nacks, last_error
// and expired_reason (only when EXPIRED).
func TestK6_DeliveryShowsControl(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	wantControlReply(t, c.Request(typeNack, nackBody{proof: d.proof(), DelayMS: delayMS(0), Reason: "try again"}))
	again := c.deliver(t)
	r := e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/subscriptions/" + sub + "/deliveries/" + d.Delivery.ID, Token: e.cred.Token})
	var detail struct {
		Delivery map[string]any `json:"delivery"`
	}
	if err := json.Unmarshal(r.Data, &detail); err != nil {
		t.Fatal(err)
	}
	if detail.Delivery["nacks"] != float64(1) || detail.Delivery["last_error"] != "try again" || detail.Delivery["expired_reason"] != nil {
		t.Fatalf("LEASED delivery %v; want nacks 1, last_error, no expired_reason", detail.Delivery)
	}
	wantControlReply(t, c.Request(typeReject, rejectBody{proof: again.proof(), Reason: "poison"}))
	r = e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/subscriptions/" + sub + "/deliveries/" + d.Delivery.ID, Token: e.cred.Token})
	if err := json.Unmarshal(r.Data, &detail); err != nil {
		t.Fatal(err)
	}
	if detail.Delivery["expired_reason"] != "REJECTED" || detail.Delivery["last_error"] != "poison" {
		t.Fatalf("EXPIRED delivery %v", detail.Delivery)
	}
}

// TestK1_K2_K3_SupersededProofIsFenced: a proof that a newer lease
// replaced cannot extend, NACK or reject; the connection stays open and
// the new lease is untouched.
func TestK1_K2_K3_SupersededProofIsFenced(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	old := c.deliver(t)
	current := c.deliver(t) // the lease ran out and was leased again
	if current.Delivery.LeaseEpoch != "2" {
		t.Fatalf("redelivery at epoch %s", current.Delivery.LeaseEpoch)
	}
	before := e.controlRow(t, old.Delivery.ID)
	wantError(t, c.Request(typeExtend, old.proof()), "DELIVERY_LEASE_LOST")
	wantError(t, c.Request(typeNack, nackBody{proof: old.proof(), DelayMS: delayMS(0)}), "DELIVERY_LEASE_LOST")
	wantError(t, c.Request(typeReject, rejectBody{proof: old.proof(), Reason: "stale"}), "DELIVERY_LEASE_LOST")
	wrong := current.proof()
	wrong.LeaseSecret = otherSecret(wrong.LeaseSecret)
	wantError(t, c.Request(typeReject, rejectBody{proof: wrong, Reason: "forged"}), "DELIVERY_LEASE_LOST")
	after := e.controlRow(t, old.Delivery.ID)
	if after.State != before.State || after.Nacks != 0 || after.ExpiredReason != "" || after.Epoch != 2 {
		t.Fatalf("fenced frames changed the delivery: %+v -> %+v", before, after)
	}
	if res := c.acked(t, current.proof()); res.Deduplicated {
		t.Fatalf("ack of the current lease: %+v", res)
	}
}

// TestK2_RaceLeavesOneOutcome: an extension, a NACK and an ACK of one
// lease sent at once from two connections leave exactly one outcome:
// either the ACK or the NACK wins, never both.
func TestK2_RaceLeavesOneOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	a := e.connect(t, e.cred, sub, 1)
	b := e.connect(t, e.cred, sub, 1)
	for round := range 8 {
		e.result(t, e.cred)
		// Either connection may receive it.
		isDeliver := func(f *wstest.Frame) bool { return f.Type == typeDeliver }
		var holder *consumer
		var f *wstest.Frame
		for deadline := time.Now().Add(bound); holder == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no delivery within %v", round, bound)
			}
			for _, c := range []*consumer{a, b} {
				if got, err := c.TryWait(20*time.Millisecond, isDeliver); err == nil {
					holder, f = c, got
					break
				}
			}
		}
		d := &delivered{frame: f}
		decode(t, f, d)
		other := a
		if holder == a {
			other = b
		}
		ext := holder.NewFrame(typeExtend, d.proof())
		nack := holder.NewFrame(typeNack, nackBody{proof: d.proof(), DelayMS: delayMS(60_000)})
		ack := other.NewFrame(typeAck, d.proof())
		other.SendFrame(ack)
		holder.SendFrame(ext)
		holder.SendFrame(nack)
		ackOK := other.Reply(ack.MessageID).Type == typeReply
		nackOK := holder.Reply(nack.MessageID).Type == typeReply
		holder.Reply(ext.MessageID)
		row := e.controlRow(t, d.Delivery.ID)
		switch {
		case ackOK == nackOK:
			t.Fatalf("round %d: ack %v and nack %v both or neither succeeded", round, ackOK, nackOK)
		case ackOK && row.State != "ACKED", nackOK && (row.State != "PENDING" || row.Nacks != 1):
			t.Fatalf("round %d: ack %v nack %v but row %+v", round, ackOK, nackOK, row)
		}
	}
}
