package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// TestE4_CapacityAcrossConnections: two connections of one credential with
// capacity 2 each compete for 1,000 deliveries of one subscription. Every
// delivery is sent and ACKed exactly once, and a poller of the database
// never sees more than 4 leases at once, nor more than 2 of one session:
// capacity is enforced in the leasing transaction.
func TestE4_CapacityAcrossConnections(t *testing.T) {
	t.Parallel()
	const (
		total    = 1000
		capacity = 2
	)
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{MaxPending: total})

	// The poller runs until the consumers are done; it is the only
	// writer of the maxima.
	var (
		maxLeased, maxPerSession atomic.Int64
		polls                    atomic.Int64
		pollErr                  error
	)
	pollCtx, stopPolling := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		// A sample every 2 ms leaves the database to the consumers.
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for pollCtx.Err() == nil {
			// One statement sees the leases of every session at one
			// instant: their sum and the largest share of one session.
			var leased, perSession int64
			err := e.srv.DB.QueryRowContext(pollCtx, `SELECT COALESCE(SUM(n), 0), COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n
				FROM event_deliveries WHERE subscription_id = ? AND state = 'LEASED' GROUP BY lease_session_id) AS s`, sub).
				Scan(&leased, &perSession)
			if err != nil {
				if pollCtx.Err() == nil {
					pollErr = err
				}
				return
			}
			polls.Add(1)
			if leased > maxLeased.Load() {
				maxLeased.Store(leased)
			}
			if perSession > maxPerSession.Load() {
				maxPerSession.Store(perSession)
			}
			select {
			case <-tick.C:
			case <-pollCtx.Done():
			}
		}
	}()
	defer func() {
		stopPolling()
		<-polled
	}()

	a := e.connect(t, e.cred, sub, capacity)
	b := e.connect(t, e.cred, sub, capacity)
	e.results(t, e.cred, total)

	// Each consumer ACKs every delivery as it arrives until all are
	// confirmed; frames are read with the Try… methods, which report
	// instead of failing from a goroutine.
	var (
		mu       sync.Mutex
		sent     = map[string]int{} // delivery id -> event.deliver frames
		eventIDs = map[string]bool{}
		acked    atomic.Int64
	)
	done := make(chan struct{})
	var closeDone sync.Once
	consume := func(c *consumer) error {
		for {
			select {
			case <-done:
				return nil
			default:
			}
			f, err := c.TryNext(100 * time.Millisecond)
			if errors.Is(err, wstest.ErrTimeout) {
				continue
			}
			if err != nil {
				return err
			}
			switch f.Type {
			case typeDeliver:
				var d delivered
				if err := f.DecodeBody(&d); err != nil {
					return err
				}
				mu.Lock()
				sent[d.Delivery.ID]++
				eventIDs[d.Event.ID] = true
				mu.Unlock()
				if _, err := c.TrySend(typeAck, d.proof()); err != nil {
					return err
				}
			case typeReply:
				var r ackReply
				if err := f.DecodeBody(&r); err != nil {
					return err
				}
				if r.Deduplicated {
					return fmt.Errorf("ack of a first proof deduplicated: %s", f)
				}
				if acked.Add(1) == total {
					closeDone.Do(func() { close(done) })
				}
			default:
				return fmt.Errorf("unexpected frame: %s", f)
			}
		}
	}
	errs := make(chan error, 2)
	for _, c := range []*consumer{a, b} {
		go func() { errs <- consume(c) }()
	}
	deadline := time.After(80 * time.Second)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				closeDone.Do(func() { close(done) })
				t.Fatal(err)
			}
		case <-deadline:
			closeDone.Do(func() { close(done) })
			t.Fatalf("%d of %d deliveries ACKed within 80 s", acked.Load(), total)
		}
	}
	stopPolling()
	<-polled
	if pollErr != nil {
		t.Fatal(pollErr)
	}

	if len(sent) != total || len(eventIDs) != total {
		t.Fatalf("%d deliveries and %d events sent, want %d", len(sent), len(eventIDs), total)
	}
	for id, n := range sent {
		if n != 1 {
			t.Fatalf("delivery %s sent %d times", id, n)
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED'`, sub); n != total {
		t.Fatalf("%d deliveries ACKED, want %d", n, total)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ?`, sub); n != total {
		t.Fatalf("%d deliveries, want %d", n, total)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM (SELECT delivery_id FROM delivery_acks WHERE subscription_id = ? GROUP BY delivery_id HAVING COUNT(*) = 1) AS a`, sub); n != total {
		t.Fatalf("%d deliveries with exactly one delivery_acks row, want %d", n, total)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM delivery_acks WHERE subscription_id = ? AND session_id NOT IN (?, ?)`, sub, a.session, b.session); n != 0 {
		t.Fatalf("%d ACKs recorded for other sessions", n)
	}
	if m := maxLeased.Load(); m > 2*capacity {
		t.Fatalf("the poller saw %d leases at once, more than 2 × %d", m, capacity)
	}
	if m := maxPerSession.Load(); m > capacity {
		t.Fatalf("the poller saw %d leases of one session, more than %d", m, capacity)
	}
	if polls.Load() < 10 {
		t.Fatalf("the poller looked only %d times", polls.Load())
	}
	if got := e.subscription(t, e.cred, sub).PendingCount; got != 0 {
		t.Fatalf("pending_count %d after every ACK, want 0", got)
	}
	t.Logf("%d polls, at most %d leases at once, %d per session", polls.Load(), maxLeased.Load(), maxPerSession.Load())
}
