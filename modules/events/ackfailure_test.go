package events_test

import (
	"testing"
)

// closeInternalError is the close code after UNAVAILABLE.
const closeInternalError = 1011

// TestE15_AckTransactionFailureIsUnavailableAndCloses: when the
// transaction that records an ACK fails, the ACK is answered with
// UNAVAILABLE and the connection is closed with 1011. Nothing was
// recorded, so the same proof sent again on a new connection acknowledges
// the delivery for the first time.
func TestE15_AckTransactionFailureIsUnavailableAndCloses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)

	// Without its audit table, the batch's transaction fails.
	e.srv.RenameTable(t, "delivery_acks", "delivery_acks_away")
	ack := c.NewFrame(typeAck, d.proof())
	c.SendFrame(ack)
	answer := c.Reply(ack.MessageID)
	wantError(t, answer, "UNAVAILABLE")
	if answer.ReplyTo != ack.MessageID || answer.SessionID != c.session {
		t.Fatalf("error envelope: %s", answer)
	}
	if rest := c.ExpectClose(closeInternalError); len(rest) != 0 {
		t.Fatalf("frames after the error: %v", rest)
	}
	if row := e.deliveryRow(t, d.Delivery.ID); row.State != "LEASED" || row.AckedAt.Valid || row.Epoch != 1 {
		t.Fatalf("the failed ACK changed the delivery: %+v", row)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks_away`); n != 0 {
		t.Fatalf("%d delivery_acks rows after the failed ACK, want 0", n)
	}
	e.srv.RenameTable(t, "delivery_acks_away", "delivery_acks")

	later := e.connect(t, e.cred, sub, 1)
	r := later.acked(t, d.proof())
	if r.Deduplicated || r.DeliveryID != d.Delivery.ID || r.Epoch != d.Delivery.LeaseEpoch {
		t.Fatalf("ACK sent again: %+v", r)
	}
	if row := e.deliveryRow(t, d.Delivery.ID); row.State != "ACKED" || !row.AckedAt.Valid {
		t.Fatalf("delivery after the ACK sent again: %+v", row)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, d.Delivery.ID); n != 1 {
		t.Fatalf("%d delivery_acks rows, want 1", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ? AND session_id = ?`, d.Delivery.ID, later.session); n != 1 {
		t.Fatalf("the ACK is not recorded for the new session %s", later.session)
	}
}
