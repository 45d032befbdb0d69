package events_test

import (
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/events"
)

// TestE14_EveryClaimChecksTheGrant: the claim after a revocation, a removed
// events:consume or a removed queue grant leases nothing, reports the
// error without reply_to and closes the connection with 1008 at once, not
// at the next heartbeat (seed 001 §1: every operation checks the queue
// scope; §7: a background claim that finds the authorization gone reports
// it).
func TestE14_EveryClaimChecksTheGrant(t *testing.T) {
	t.Parallel()
	// The periodic check runs every heartbeat interval, 15 s by default:
	// longer than every wait of this test.
	e := setup(t)
	for _, tt := range e.srv.GrantChanges(auth.PermEventsConsume) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			cred := e.ownQueue(t)
			sub := e.subscribe(t, cred, subscriptionParams{})
			c := e.connect(t, cred, sub, 1)
			tt.Apply(t, cred.CredentialID)
			e.results(t, cred, 1)
			f := c.NextType(typeError)
			wantError(t, f, tt.Code)
			if f.ReplyTo != "" || f.SessionID != c.session {
				t.Fatalf("claim error envelope: %s", f)
			}
			c.ExpectClose(closePolicyViolation)
			if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND lease_epoch > 0`, sub); n != 0 {
				t.Fatalf("%d deliveries leased after the change", n)
			}
		})
	}
}

// TestE14_EveryAckChecksTheGrant: an ACK after a revocation, a removed
// events:consume or a removed queue grant records nothing, is answered
// with the error (reply_to the ACK) and the connection closes with 1008.
func TestE14_EveryAckChecksTheGrant(t *testing.T) {
	t.Parallel()
	// Claims run only after the welcome, after deliveries and when results
	// are signalled, so that once settled no claim finds the change before
	// the ACK does.
	e := setup(t, eventsConfig(func(c *events.Config) { c.PollInterval = time.Hour }))
	for _, tt := range e.srv.GrantChanges(auth.PermEventsConsume) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			cred := e.ownQueue(t)
			sub := e.subscribe(t, cred, subscriptionParams{})
			c := e.connect(t, cred, sub, 1)
			e.results(t, cred, 1)
			d := c.deliver(t)
			c.settle()
			tt.Apply(t, cred.CredentialID)
			ack := c.NewFrame(typeAck, d.proof())
			c.SendFrame(ack)
			f := c.Reply(ack.MessageID)
			wantError(t, f, tt.Code)
			if f.SessionID != c.session {
				t.Fatalf("ACK error envelope: %s", f)
			}
			c.ExpectClose(closePolicyViolation)
			if row := e.deliveryRow(t, d.Delivery.ID); row.State != "LEASED" || row.AckedAt.Valid {
				t.Fatalf("refused ACK changed the delivery: %+v", row)
			}
			if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, d.Delivery.ID); n != 0 {
				t.Fatalf("refused ACK left %d audit records", n)
			}
		})
	}
}

// TestE15_AckOfAnUnknownDeliveryIsNotFoundAndCloses: an ACK naming a
// delivery that does not exist is NOT_FOUND, answered with reply_to, and a
// NOT_FOUND inside a connection closes it (seed 001 §7).
func TestE15_AckOfAnUnknownDeliveryIsNotFoundAndCloses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	f := c.ack(t, proof{DeliveryID: wstest.NewID(), Epoch: "1", LeaseSecret: otherSecret("")})
	wantError(t, f, "NOT_FOUND")
	if f.SessionID != c.session {
		t.Fatalf("error envelope: %s", f)
	}
	c.ExpectClose(closePolicyViolation)
}
