package events_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// seedDeliveryMembers are the members of the seed's event.deliver
// delivery, a LEASED EventDelivery.
var seedDeliveryMembers = []string{
	"created_at", "id", "subscription_id", "event_id", "sequence", "revision", "state",
	"available_at", "lease_epoch", "lease_until", "attempts", "attempt_budget",
}

// seedEventMembers are the members of the seed's event.
var seedEventMembers = []string{
	"id", "sequence", "type", "aggregate_kind", "aggregate_id", "aggregate_revision", "occurred_at", "details", "snapshot",
}

// TestE7_LeaseCommittedBeforeDeliver: when event.deliver arrives its lease
// is already in the database (LEASED, that epoch, this session, the
// secret's digest only), and its body is exactly {delivery, event,
// lease_secret} as in the seed.
func TestE7_LeaseCommittedBeforeDeliver(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	taskID := e.result(t, e.cred)
	d := c.deliver(t)

	row := e.deliveryRow(t, d.Delivery.ID)
	if row.State != "LEASED" || row.Session.String != c.session || row.Epoch != uint64Of(t, d.Delivery.LeaseEpoch) {
		t.Fatalf("row when event.deliver arrived: %+v, frame epoch %s, session %s", row, d.Delivery.LeaseEpoch, c.session)
	}
	if !row.LeaseUntil.Valid || httpx.FormatTime(row.LeaseUntil.Time) != d.Delivery.LeaseUntil {
		t.Fatalf("row lease_until %v, frame %s", row.LeaseUntil, d.Delivery.LeaseUntil)
	}
	if !bytes.Equal(row.Digest, secretDigest(d.LeaseSecret)) || bytes.Contains(row.Digest, []byte(d.LeaseSecret)) {
		t.Fatalf("the row does not hold the secret's digest only")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(d.LeaseSecret)
	if err != nil || len(raw) != 32 || len(d.LeaseSecret) != 43 {
		t.Fatalf("lease_secret is not 32 bytes of unpadded base64url: %v", err)
	}

	wantMembers(t, "deliver body", d.frame.Body, "delivery", "event", "lease_secret")
	var body map[string]json.RawMessage
	if err := json.Unmarshal(d.frame.Body, &body); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, "delivery", body["delivery"], seedDeliveryMembers...)
	wantMembers(t, "event", body["event"], seedEventMembers...)
	if d.frame.ReplyTo != "" || d.frame.SessionID != c.session {
		t.Errorf("event.deliver envelope: %s", d.frame)
	}
	if d.Delivery.State != "LEASED" || d.Delivery.SubscriptionID != sub || d.Delivery.EventID != d.Event.ID ||
		d.Delivery.Sequence != d.Event.Sequence || d.Event.AggregateID != taskID || d.Event.Type != "task.cancelled" {
		t.Errorf("deliver body: %s", d.frame.Body)
	}
	// The event is the one the management API shows for the delivery.
	_, event := e.deliveryDetail(t, e.cred, sub, d.Delivery.ID)
	if !jsonEqual(t, event, body["event"]) {
		t.Errorf("event %s, the delivery's detail says %s", body["event"], event)
	}

	doctest.Check(t, docPath, "events-deliver", d.frame.Raw)
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// TestE8_LeaseEpochAttemptsAndBudget: every lease adds one to lease_epoch
// and attempts and lasts lease_duration; once the attempts reach the budget
// and the last lease runs out, the delivery is EXPIRED and not sent again.
func TestE8_LeaseEpochAttemptsAndBudget(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())
	sub := e.subscribe(t, e.cred, subscriptionParams{MaxAttempts: 2})
	c := e.connect(t, e.cred, sub, 1)
	if c.body.LeaseDurationMS != shortLease.Milliseconds() {
		t.Fatalf("lease_duration_ms %d, want %d", c.body.LeaseDurationMS, shortLease.Milliseconds())
	}

	before := time.Now().Add(-time.Millisecond)
	e.result(t, e.cred)
	first := c.deliver(t)
	received := time.Now()
	if first.Delivery.LeaseEpoch != "1" || first.Delivery.Attempts != 1 || first.Delivery.AttemptBudget != 2 {
		t.Fatalf("first lease: %+v", first.Delivery)
	}
	until := parseTime(t, first.Delivery.LeaseUntil)
	if until.Before(before.Add(shortLease)) || until.After(received.Add(shortLease)) {
		t.Fatalf("lease_until %s, want lease_duration after the claim (between %s and %s)", until, before.Add(shortLease), received.Add(shortLease))
	}

	// Not ACKed: the lease runs out and the same connection gets it again.
	second := c.deliver(t)
	if second.Delivery.ID != first.Delivery.ID || second.Delivery.LeaseEpoch != "2" || second.Delivery.Attempts != 2 {
		t.Fatalf("second lease: %+v", second.Delivery)
	}
	if !parseTime(t, second.Delivery.LeaseUntil).After(until) || uint64Of(t, second.Delivery.Revision) <= uint64Of(t, first.Delivery.Revision) {
		t.Fatalf("second lease %+v does not follow the first %+v", second.Delivery, first.Delivery)
	}

	// The budget is used up: when this lease runs out, it is EXPIRED.
	row := e.waitDeliveryState(t, first.Delivery.ID, "EXPIRED")
	if row.Epoch != 2 || row.Attempts != 2 || row.LeaseUntil.Valid || row.Session.Valid {
		t.Fatalf("expired row: %+v", row)
	}
	c.ExpectNone(quiet)
	view, _ := e.deliveryDetail(t, e.cred, sub, first.Delivery.ID)
	if view.State != "EXPIRED" || view.LeaseUntil != "" || view.Attempts != 2 || view.LeaseEpoch != "2" {
		t.Fatalf("expired delivery over HTTP: %+v", view)
	}
	if got := e.subscription(t, e.cred, sub).PendingCount; got != 1 {
		t.Fatalf("pending_count %d, want 1: an EXPIRED delivery keeps its backlog slot", got)
	}
}

// TestE9_Ack: an ACK with the latest proof makes the delivery ACKED with
// acknowledged_at, reduces pending_count, writes one audit record and
// answers ack {delivery_id, event_id, epoch, acknowledged_at, deduplicated:
// false}.
func TestE9_Ack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 2)
	e.result(t, e.cred)
	e.result(t, e.cred)
	d, other := c.deliver(t), c.deliver(t)
	if other.Delivery.ID == d.Delivery.ID {
		t.Fatalf("one delivery sent twice")
	}
	if got := e.subscription(t, e.cred, sub).PendingCount; got != 2 {
		t.Fatalf("pending_count %d before the ACK, want 2", got)
	}
	before := e.deliveryRow(t, d.Delivery.ID)

	ack := c.NewFrame(typeAck, d.proof())
	c.SendFrame(ack)
	reply := c.Reply(ack.MessageID)
	r := wantAckReply(t, reply)
	if reply.SessionID != c.session || reply.MessageID == ack.MessageID {
		t.Errorf("ack envelope: %s", reply)
	}
	wantMembers(t, "ack body", reply.Body, "delivery_id", "event_id", "epoch", "acknowledged_at", "deduplicated")
	if r.DeliveryID != d.Delivery.ID || r.EventID != d.Event.ID || r.Epoch != d.Delivery.LeaseEpoch || r.Deduplicated {
		t.Fatalf("ack body %+v", r)
	}

	row := e.deliveryRow(t, d.Delivery.ID)
	if row.State != "ACKED" || !row.AckedAt.Valid || httpx.FormatTime(row.AckedAt.Time) != r.AcknowledgedAt ||
		row.Revision != before.Revision+1 || row.LeaseUntil.Valid {
		t.Fatalf("row after the ACK: %+v, reply %+v", row, r)
	}
	var epoch uint64
	var session, ackedAt string
	var at time.Time
	if err := e.srv.DB.QueryRow(`SELECT epoch, session_id, acknowledged_at FROM delivery_acks WHERE delivery_id = ?`, d.Delivery.ID).
		Scan(&epoch, &session, &at); err != nil {
		t.Fatal(err)
	}
	ackedAt = httpx.FormatTime(at)
	if epoch != 1 || session != c.session || ackedAt != r.AcknowledgedAt {
		t.Fatalf("delivery_acks row %d %s %s", epoch, session, ackedAt)
	}
	if got := e.subscription(t, e.cred, sub).PendingCount; got != 1 {
		t.Fatalf("pending_count %d after the ACK, want 1", got)
	}
	view, _ := e.deliveryDetail(t, e.cred, sub, d.Delivery.ID)
	if view.State != "ACKED" || view.AcknowledgedAt != r.AcknowledgedAt || view.LeaseUntil != "" {
		t.Fatalf("ACKED delivery over HTTP: %+v", view)
	}

	doctest.Check(t, docPath, "events-ack", ack.Raw)
	doctest.Check(t, docPath, "events-ack-reply", reply.Raw)
}

// TestE10_SameProofAgain: the same proof again, on this or a later
// connection, returns the original acknowledged_at with deduplicated true
// and changes nothing: no second backlog decrement, no second audit record.
func TestE10_SameProofAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	first := c.acked(t, d.proof())
	e.result(t, e.cred)
	c.deliver(t) // a second delivery stays in the backlog
	after := e.deliveryRow(t, d.Delivery.ID)
	pending := e.subscription(t, e.cred, sub).PendingCount
	if pending != 1 {
		t.Fatalf("pending_count %d, want 1", pending)
	}

	check := func(t *testing.T, r ackReply) {
		t.Helper()
		if !r.Deduplicated || r.AcknowledgedAt != first.AcknowledgedAt || r.DeliveryID != first.DeliveryID ||
			r.EventID != first.EventID || r.Epoch != first.Epoch {
			t.Fatalf("repeated ACK %+v, first %+v", r, first)
		}
		if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, d.Delivery.ID); n != 1 {
			t.Fatalf("%d delivery_acks rows, want 1", n)
		}
		if row := e.deliveryRow(t, d.Delivery.ID); row.Revision != after.Revision || !row.AckedAt.Time.Equal(after.AckedAt.Time) {
			t.Fatalf("the repeat changed the delivery: %+v, was %+v", row, after)
		}
		if got := e.subscription(t, e.cred, sub).PendingCount; got != pending {
			t.Fatalf("pending_count %d after a repeat, want %d", got, pending)
		}
	}
	t.Run("SameConnection", func(t *testing.T) {
		check(t, c.acked(t, d.proof()))
	})
	t.Run("LaterConnection", func(t *testing.T) {
		later := e.connect(t, e.cred, sub, 1)
		check(t, later.acked(t, d.proof()))
	})
	t.Run("OtherSubscription", func(t *testing.T) {
		// The proof belongs to its subscription: elsewhere its delivery
		// is NOT_FOUND, which closes the connection (seed 001 §7).
		other := e.subscribe(t, e.cred, subscriptionParams{Types: []string{"task.succeeded"}})
		elsewhere := e.connect(t, e.cred, other, 1)
		wantError(t, elsewhere.ack(t, d.proof()), "NOT_FOUND")
		elsewhere.ExpectClose(closePolicyViolation)
	})
}

// TestE11_LateAck: the latest proof ACKs after its lease ran out as long as
// no new lease replaced it; once one did, the old proof gets
// DELIVERY_LEASE_LOST and the connection stays open. A wrong secret gets
// the same answer.
func TestE11_LateAck(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())

	t.Run("AfterLeaseUntil", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := c.deliver(t)
		// Paused, nothing leases the delivery again; the sweeper makes
		// it PENDING once the lease has run out.
		e.configure(t, cred, sub, false)
		row := e.waitDeliveryState(t, d.Delivery.ID, "PENDING")
		if row.Epoch != 1 {
			t.Fatalf("recovered row: %+v", row)
		}
		r := c.acked(t, d.proof())
		if r.Deduplicated || r.Epoch != "1" {
			t.Fatalf("late ACK: %+v", r)
		}
		if row := e.deliveryRow(t, d.Delivery.ID); row.State != "ACKED" {
			t.Fatalf("after the late ACK: %+v", row)
		}
	})
	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{MaxAttempts: 1})
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		d := c.deliver(t)
		e.waitDeliveryState(t, d.Delivery.ID, "EXPIRED")
		if r := c.acked(t, d.proof()); r.Deduplicated {
			t.Fatalf("late ACK of an EXPIRED delivery: %+v", r)
		}
		if got := e.subscription(t, cred, sub).PendingCount; got != 0 {
			t.Fatalf("pending_count %d, want 0", got)
		}
	})
	t.Run("AfterNewLease", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		e.result(t, cred)
		old := c.deliver(t)
		current := c.deliver(t)
		if current.Delivery.ID != old.Delivery.ID || current.Delivery.LeaseEpoch != "2" {
			t.Fatalf("redelivery: %+v", current.Delivery)
		}
		ack := c.NewFrame(typeAck, old.proof())
		c.SendFrame(ack)
		lost := c.Reply(ack.MessageID)
		wantError(t, lost, "DELIVERY_LEASE_LOST")
		if lost.SessionID != c.session {
			t.Fatalf("error without the session: %s", lost)
		}
		// The connection stays open and the current proof still works,
		// if it is quick enough for the short lease; a lost race shows
		// as another redelivery, which is also correct.
		wantPingReply(t, c.ping(t))
		if f := c.ack(t, current.proof()); f.Type == typeReply {
			if r := wantAckReply(t, f); r.Epoch != "2" || r.Deduplicated {
				t.Fatalf("ACK of the current proof: %+v", r)
			}
		} else {
			wantError(t, f, "DELIVERY_LEASE_LOST")
			if row := e.deliveryRow(t, current.Delivery.ID); row.Epoch < 3 {
				t.Fatalf("current proof refused while it held the latest epoch: %+v", row)
			}
		}
		if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ? AND epoch = 1`, old.Delivery.ID); n != 0 {
			t.Fatalf("the superseded proof left an audit record")
		}
	})

	t.Run("WrongProof", func(t *testing.T) {
		t.Parallel()
		e := setup(t) // leases of 30 s: nothing is leased again here
		sub := e.subscribe(t, e.cred, subscriptionParams{})
		c := e.connect(t, e.cred, sub, 1)
		e.result(t, e.cred)
		d := c.deliver(t)
		wrongSecret := d.proof()
		wrongSecret.LeaseSecret = otherSecret(d.LeaseSecret)
		wrongEpoch := d.proof()
		wrongEpoch.Epoch = "2"
		var message string
		for i, p := range []proof{wrongSecret, wrongEpoch} {
			ack := c.NewFrame(typeAck, p)
			c.SendFrame(ack)
			f := c.Reply(ack.MessageID)
			wantError(t, f, "DELIVERY_LEASE_LOST")
			if f.SessionID != c.session {
				t.Fatalf("error without the session: %s", f)
			}
			if message != "" && f.Error.Message != message {
				t.Fatalf("answers differ: %q and %q", message, f.Error.Message)
			}
			message = f.Error.Message
			if i == 0 {
				doctest.Check(t, docPath, "events-ack-wrong-secret", ack.Raw)
				doctest.Check(t, docPath, "events-error-lease-lost", f.Raw)
			}
		}
		if row := e.deliveryRow(t, d.Delivery.ID); row.State != "LEASED" || row.Epoch != 1 {
			t.Fatalf("wrong proofs changed the delivery: %+v", row)
		}
		if r := c.acked(t, d.proof()); r.Deduplicated {
			t.Fatalf("ACK of the right proof: %+v", r)
		}
	})
}

// TestE12_RedeliveryAfterLeaseExpiry: delivery is at least once. A lease
// that runs out after its connection was lost is sent again, on another
// connection, with the same delivery id and event and a new epoch and
// secret; the old proof no longer ACKs.
func TestE12_RedeliveryAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t, shortLeases())
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	first := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	lost := first.deliver(t)
	first.Close()

	second := e.connect(t, e.cred, sub, 1)
	again := second.deliver(t)
	if again.Delivery.ID != lost.Delivery.ID || again.Event.ID != lost.Event.ID || again.Delivery.LeaseEpoch != "2" ||
		again.Delivery.Attempts != 2 || again.LeaseSecret == lost.LeaseSecret {
		t.Fatalf("redelivery %+v after %+v", again.Delivery, lost.Delivery)
	}
	if !jsonEqual(t, member(t, again.frame.Body, "event"), member(t, lost.frame.Body, "event")) {
		t.Fatalf("the event changed between deliveries")
	}
	if row := e.deliveryRow(t, again.Delivery.ID); row.Session.String != second.session {
		t.Fatalf("redelivered lease held by %s, want %s", row.Session.String, second.session)
	}
	// Quick enough for the short lease, the new proof ACKs and the old
	// one is refused.
	wantError(t, second.ack(t, lost.proof()), "DELIVERY_LEASE_LOST")
	if f := second.ack(t, again.proof()); f.Type == typeReply {
		if r := wantAckReply(t, f); r.Epoch != "2" {
			t.Fatalf("ACK of the new proof: %+v", r)
		}
	}
}

// TestE13_PausedSubscription: a paused subscription keeps its connections,
// pings (enabled false) and the ACKs of deliveries already held, and sends
// nothing new; a manual retry of an EXPIRED delivery sends it again.
func TestE13_PausedSubscription(t *testing.T) {
	t.Parallel()

	t.Run("Paused", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		sub := e.subscribe(t, e.cred, subscriptionParams{})
		c := e.connect(t, e.cred, sub, 1)
		e.result(t, e.cred)
		e.result(t, e.cred)
		held := c.deliver(t)
		eventually(t, "both results materialised", func() bool {
			return e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'PENDING'`, sub) == 1
		})

		e.configure(t, e.cred, sub, false)
		if r := wantPingReply(t, c.ping(t)); r.Enabled {
			t.Fatalf("ping of a paused subscription: %+v", r)
		}
		// The ACK of the held delivery works and frees the capacity, yet
		// the PENDING delivery is not sent, nor is a new result taken in.
		if r := c.acked(t, held.proof()); r.Deduplicated {
			t.Fatalf("ACK while paused: %+v", r)
		}
		e.result(t, e.cred)
		c.ExpectNone(quiet)
		// A connection opened while paused is welcomed, with enabled
		// false, and gets nothing either.
		late := e.connect(t, e.cred, sub, 1)
		if late.body.Enabled {
			t.Fatalf("welcome of a paused subscription: %+v", late.body)
		}
		wantPingReply(t, late.ping(t))
		late.ExpectNone(quiet)
		c.ExpectNone(0)
		if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ?`, sub); n != 2 {
			t.Fatalf("%d deliveries while paused, want the 2 from before", n)
		}

		// Resumed, the waiting delivery and the result that came
		// meanwhile are sent.
		e.configure(t, e.cred, sub, true)
		seen := map[string]bool{}
		for range 2 {
			d := firstDeliver(t, c, late)
			if d.Delivery.ID == held.Delivery.ID || seen[d.Delivery.ID] {
				t.Fatalf("delivery %s sent again", d.Delivery.ID)
			}
			seen[d.Delivery.ID] = true
		}
		if r := wantPingReply(t, c.ping(t)); !r.Enabled {
			t.Fatalf("ping after resuming: %+v", r)
		}
	})

	t.Run("RetryExpired", func(t *testing.T) {
		t.Parallel()
		e := setup(t, shortLeases())
		sub := e.subscribe(t, e.cred, subscriptionParams{MaxAttempts: 1})
		c := e.connect(t, e.cred, sub, 1)
		e.result(t, e.cred)
		d := c.deliver(t)
		e.waitDeliveryState(t, d.Delivery.ID, "EXPIRED")
		c.ExpectNone(quiet)

		retried := e.retry(t, e.cred, sub, d.Delivery.ID)
		if retried.State != "PENDING" || retried.AttemptBudget != 2 || retried.Attempts != 1 {
			t.Fatalf("retry receipt: %+v", retried)
		}
		again := c.deliver(t)
		if again.Delivery.ID != d.Delivery.ID || again.Delivery.LeaseEpoch != "2" || again.Delivery.Attempts != 2 ||
			again.Delivery.AttemptBudget != 2 {
			t.Fatalf("delivery after the retry: %+v", again.Delivery)
		}
		if r := c.acked(t, again.proof()); r.Epoch != "2" {
			t.Fatalf("ACK after the retry: %+v", r)
		}
	})
}

// firstDeliver returns the first event.deliver that arrives on any of
// the connections.
func firstDeliver(t testing.TB, cs ...*consumer) *delivered {
	t.Helper()
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		for _, c := range cs {
			f, err := c.TryWait(10*time.Millisecond, func(f *wstest.Frame) bool { return f.Type == typeDeliver })
			if err == nil {
				d := &delivered{frame: f}
				decode(t, f, d)
				return d
			}
			if isClosed(err) {
				t.Fatal(err)
			}
		}
	}
	t.Fatalf("no event.deliver within %s", bound)
	return nil
}

// member returns the member name of the JSON object raw.
func member(t testing.TB, raw []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}

// uint64Of parses a decimal string of the protocol.
func uint64Of(t testing.TB, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("uint64 %q: %v", s, err)
	}
	return n
}
