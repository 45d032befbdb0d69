package events_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules"
)

// TestE16_StopKeepsDeliveriesAndLeases: neither a node shutting down nor a
// broken connection removes persisted deliveries or leases; the leases
// stay until they are ACKed with their proofs or recovered.
func TestE16_StopKeepsDeliveriesAndLeases(t *testing.T) {
	t.Parallel()

	t.Run("NodeStop", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		sub := e.subscribe(t, e.cred, subscriptionParams{})
		c := e.connect(t, e.cred, sub, 2)
		e.result(t, e.cred)
		e.result(t, e.cred)
		acked, held := c.deliver(t), c.deliver(t)
		c.acked(t, acked.proof())
		before := e.deliveryRow(t, held.Delivery.ID)

		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if err := e.srv.Instances["events"].(modules.Stopper).Stop(ctx); err != nil {
			t.Fatal(err)
		}
		c.ExpectClose(closeGoingAway)
		wantRefusal(t, wstest.DialRefused(t, e.options(t, e.cred)), http.StatusServiceUnavailable, "UNAVAILABLE")

		after := e.deliveryRow(t, held.Delivery.ID)
		if after.State != "LEASED" || after.Epoch != before.Epoch || after.Revision != before.Revision ||
			!bytes.Equal(after.Digest, before.Digest) || after.Session != before.Session || !after.LeaseUntil.Time.Equal(before.LeaseUntil.Time) {
			t.Fatalf("the stop changed the lease: %+v, was %+v", after, before)
		}
		if row := e.deliveryRow(t, acked.Delivery.ID); row.State != "ACKED" {
			t.Fatalf("the stop changed the ACKED delivery: %+v", row)
		}
		if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ?`, sub); n != 2 {
			t.Fatalf("%d deliveries after the stop, want 2", n)
		}
		if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, acked.Delivery.ID); n != 1 {
			t.Fatalf("%d ACK records after the stop, want 1", n)
		}
		if n := e.count(t, `SELECT COUNT(*) FROM event_sessions WHERE id = ? AND closed_at IS NOT NULL`, c.session); n != 1 {
			t.Fatalf("the session is not marked closed")
		}
	})

	t.Run("BrokenConnection", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		sub := e.subscribe(t, e.cred, subscriptionParams{})
		ws, session := rawHello(t, e, sub, 1)
		e.result(t, e.cred)
		f := rawRead(t, ws)
		var d delivered
		decode(t, f, &d)
		// The socket goes away without a close frame.
		if err := ws.UnderlyingConn().Close(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the broken session closed", func() bool {
			return e.count(t, `SELECT COUNT(*) FROM event_sessions WHERE id = ? AND closed_at IS NOT NULL`, session) == 1
		})
		if row := e.deliveryRow(t, d.Delivery.ID); row.State != "LEASED" || row.Session.String != session || row.Epoch != 1 {
			t.Fatalf("after the broken connection: %+v", row)
		}
		// The proof it got still ACKs on a new connection (E-5).
		c := e.connect(t, e.cred, sub, 1)
		if r := c.acked(t, d.proof()); r.Deduplicated || r.DeliveryID != d.Delivery.ID {
			t.Fatalf("ACK of the broken connection's proof: %+v", r)
		}
	})
}

// TestE6_ControlTrafficNotBehindClaims: claims run apart from the request
// loop, so pings and ACKs are answered while a claim of the same
// connection waits for rows another transaction holds.
func TestE6_ControlTrafficNotBehindClaims(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)

	// Another transaction holds the subscription's row and its session
	// rows, which every claim and every materialisation lock first.
	ctx := context.Background()
	tx, err := e.srv.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var id string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM subscriptions WHERE id = ? FOR UPDATE`, sub).Scan(&id); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id FROM event_sessions WHERE subscription_id = ? FOR UPDATE`, sub)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()

	// The ACK frees the connection's capacity, so it claims again and
	// waits for the locks.
	if r := c.acked(t, d.proof()); r.Deduplicated {
		t.Fatalf("first ACK: %+v", r)
	}
	// The server refreshes information_schema.INNODB_TRX only when nobody
	// read it for 100 ms, so this poll waits longer than that between reads.
	deadline := time.Now().Add(bound)
	for e.count(t, `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
		JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a claim waiting for the locked rows: not within %s", bound)
		}
		time.Sleep(150 * time.Millisecond)
	}

	// Meanwhile control traffic is answered at once.
	for range 3 {
		start := time.Now()
		wantPingReply(t, c.ping(t))
		if r := c.acked(t, d.proof()); !r.Deduplicated {
			t.Fatalf("repeated ACK: %+v", r)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("ping and ACK took %s while a claim waited", took)
		}
	}
	e.result(t, e.cred)
	c.ExpectNone(quiet)

	// Once the locks are gone the connection is served again.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	next := c.deliver(t)
	if next.Delivery.ID == d.Delivery.ID {
		t.Fatalf("the ACKed delivery was sent again")
	}
}
