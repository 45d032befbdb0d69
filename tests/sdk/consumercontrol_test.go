package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/modules/events"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// controlRow is a delivery's consumer-control state.
type controlRow struct {
	state, expiredReason, lastError string
	epoch                           uint64
	nacks                           int
}

// controlRows returns the consumer-control state of the subscription's
// deliveries, by task ID.
func controlRows(t *testing.T, e *consumerEnv) map[string]controlRow {
	t.Helper()
	rows, err := e.srv.DB.Query(`SELECT e.task_id, d.state, COALESCE(d.expired_reason, ''), COALESCE(d.last_error, ''), d.lease_epoch, d.nacks
		FROM event_deliveries d JOIN result_events e ON e.queue_id = d.queue_id AND e.id = d.event_id WHERE d.subscription_id = ?`, e.sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]controlRow{}
	for rows.Next() {
		var task string
		var r controlRow
		if err := rows.Scan(&task, &r.state, &r.expiredReason, &r.lastError, &r.epoch, &r.nacks); err != nil {
			t.Fatal(err)
		}
		out[task] = r
	}
	return out
}

// TestK15_HandlerResultDecidesTheFrame: nil ACKs; Retry NACKs with its
// delay; Reject rejects; another error NACKs with the subscription's
// policy. Each failing handler succeeds on its second call.
func TestK15_HandlerResultDecidesTheFrame(t *testing.T) {
	t.Parallel()
	e := setupConsumer(t, 10)
	tasksIDs := e.produce(t, 4)
	ack, retry, reject, fail := tasksIDs[0], tasksIDs[1], tasksIDs[2], tasksIDs[3]
	var mu sync.Mutex
	calls := map[string]int{}
	rc := startConsumer(t, e.config(t, 4), func(_ context.Context, d *orbit.Delivery) error {
		mu.Lock()
		calls[d.Event.AggregateID]++
		n := calls[d.Event.AggregateID]
		mu.Unlock()
		switch {
		case d.Event.AggregateID == retry && n == 1:
			return orbit.Retry(errors.New("downstream busy"), 200*time.Millisecond)
		case d.Event.AggregateID == reject:
			return orbit.Reject("unknown schema version")
		case d.Event.AggregateID == fail && n == 1:
			return errors.New("inbox unavailable")
		}
		return nil
	})
	waitUntil(t, 30*time.Second, "three ACKED and one rejected", func() bool {
		rows := controlRows(t, e)
		return rows[ack].state == "ACKED" && rows[retry].state == "ACKED" && rows[fail].state == "ACKED" && rows[reject].state == "EXPIRED"
	}, func() string { return fmt.Sprint(controlRows(t, e)) })
	rows := controlRows(t, e)
	want := map[string]controlRow{
		ack:    {state: "ACKED", epoch: 1},
		retry:  {state: "ACKED", epoch: 2, nacks: 1, lastError: "retry after 200ms: downstream busy"},
		reject: {state: "EXPIRED", epoch: 1, expiredReason: "REJECTED", lastError: "unknown schema version"},
		fail:   {state: "ACKED", epoch: 2, nacks: 1, lastError: "inbox unavailable"},
	}
	for task, w := range want {
		if rows[task] != w {
			t.Errorf("task %s: %+v, want %+v", task, rows[task], w)
		}
	}
	if err := rc.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := rc.c.Stats(); st.Acked != 3 || st.Nacked != 2 || st.Rejected != 1 || st.HandlerErrors != 3 || st.LeaseLost != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestK15_FailedHandlerSeesTheEventAgainSoon: with the default retry
// policy, a handler that returns an error sees the event again after about
// a second, not after the 30-second lease.
func TestK15_FailedHandlerSeesTheEventAgainSoon(t *testing.T) {
	t.Parallel()
	e := setupConsumer(t, 10)
	calls := make(chan time.Time, 2)
	startConsumer(t, e.config(t, 1), func(_ context.Context, d *orbit.Delivery) error {
		calls <- time.Now()
		if d.Proof.Epoch == 1 {
			return errors.New("inbox unavailable")
		}
		return nil
	})
	e.produce(t, 1)
	first := <-calls
	select {
	case second := <-calls:
		// Full jitter: 0 to 1 s, plus the claim's poll.
		if gap := second.Sub(first); gap > 3*time.Second {
			t.Fatalf("seen again after %v, want about a second", gap)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not seen again within 10 s (the lease is 30 s)")
	}
}

// TestK15_LongHandlerKeepsItsLease: a handler that runs three times the
// lease duration keeps its lease through automatic extensions and
// acknowledges once, with the first epoch.
func TestK15_LongHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	e := setupConsumer(t, 10, eventsSection(func(c *events.Config) { c.LeaseDuration = lease }))
	var calls atomic.Int32
	rc := startConsumer(t, e.config(t, 1), func(ctx context.Context, d *orbit.Delivery) error {
		calls.Add(1)
		select {
		case <-time.After(3 * lease):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	e.produce(t, 1)
	waitUntil(t, 30*time.Second, "ACKED", func() bool { return countAcked(t, e.srv.DB, e.sub.ID) == 1 },
		func() string { return fmt.Sprint(controlRows(t, e)) })
	if err := rc.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, r := range controlRows(t, e) {
		if r.epoch != 1 {
			t.Errorf("delivery %+v, want ACKED at epoch 1", r)
		}
	}
	if st := rc.c.Stats(); calls.Load() != 1 || st.Delivered != 1 || st.Acked != 1 || st.Extended < 2 {
		t.Errorf("%d calls, stats %+v; want one delivery, one ACK, at least two extensions", calls.Load(), st)
	}
}

// TestK15_RefusedExtensionCancelsTheHandler: when the server refuses an
// extension (the lease is gone), the handler's context is cancelled.
func TestK15_RefusedExtensionCancelsTheHandler(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	e := setupConsumer(t, 10, eventsSection(func(c *events.Config) { c.LeaseDuration = lease }))
	started := make(chan string, 1)
	cancelled := make(chan struct{})
	startConsumer(t, e.config(t, 1), func(ctx context.Context, d *orbit.Delivery) error {
		if d.Proof.Epoch != 1 {
			return nil
		}
		started <- d.ID
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})
	e.produce(t, 1)
	id := <-started
	// The lease runs out on the server before the consumer extends it.
	if _, err := e.srv.DB.Exec(`UPDATE event_deliveries SET lease_until = ? WHERE id = ?`, time.Now().UTC().Add(-time.Second), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled after a refused extension")
	}
}
