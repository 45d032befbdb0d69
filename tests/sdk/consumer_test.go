package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// eventsSchemaPath is the orbit.events.v1 schema (E-18).
const eventsSchemaPath = "../../docs/api/events.schema.json"

// handledLog records the handler calls of consumers: the lease epochs
// each event was handed out with.
type handledLog struct {
	mu     sync.Mutex
	epochs map[string][]uint64 // by event ID
	calls  int
}

func newHandledLog() *handledLog { return &handledLog{epochs: map[string][]uint64{}} }

func (l *handledLog) add(d *orbit.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs[d.Event.ID] = append(l.epochs[d.Event.ID], d.Proof.Epoch)
	l.calls++
}

// check fails the test unless every delivery of rows was handled, each
// lease at most once, and the handler was called again for an event only
// through a redelivery (a newer epoch); it returns the number of calls.
func (l *handledLog) check(t *testing.T, rows map[string]deliveryRow) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range rows {
		epochs := l.epochs[d.eventID]
		if len(epochs) == 0 {
			t.Errorf("event %s (delivery %s) was never handled", d.eventID, d.id)
			continue
		}
		sorted := slices.Sorted(slices.Values(epochs))
		if len(slices.Compact(sorted)) != len(epochs) {
			t.Errorf("event %s was handled twice with the same lease: epochs %v", d.eventID, epochs)
		}
		if sorted[len(sorted)-1] > d.epoch {
			t.Errorf("event %s was handled with epoch %d; the delivery's latest epoch is %d", d.eventID, sorted[len(sorted)-1], d.epoch)
		}
	}
	if len(l.epochs) != len(rows) {
		t.Errorf("%d events handled, %d delivered", len(l.epochs), len(rows))
	}
	return l.calls
}

// checkAckedOnce fails the test unless every delivery is ACKED with exactly
// one audit record.
func checkAckedOnce(t *testing.T, rows map[string]deliveryRow, want int) {
	t.Helper()
	if len(rows) != want {
		t.Errorf("%d deliveries, want %d", len(rows), want)
	}
	for _, d := range rows {
		if d.state != subscriptions.StateAcked || d.acks != 1 {
			t.Errorf("delivery %s is %s with %d rows in delivery_acks; want ACKED with one", d.id, d.state, d.acks)
		}
	}
}

// TestE17_ConsumerAcksEveryEventOnce runs two consumers of capacity 2 on
// one subscription and checks that 1,000 results are each handled and
// acknowledged exactly once (E-4, E-9, E-17).
func TestE17_ConsumerAcksEveryEventOnce(t *testing.T) {
	t.Parallel()
	const total = 1000
	e := setupConsumer(t, total)
	handled := newHandledLog()
	handler := func(_ context.Context, d *orbit.Delivery) error {
		handled.add(d)
		return nil
	}
	consumers := []*runningConsumer{startConsumer(t, e.config(t, 2), handler), startConsumer(t, e.config(t, 2), handler)}
	e.produce(t, total)
	waitUntil(t, 3*time.Minute, "every delivery ACKED", func() bool { return countAcked(t, e.srv.DB, e.sub.ID) == total },
		func() string { return fmt.Sprintf("%d of %d ACKED", countAcked(t, e.srv.DB, e.sub.ID), total) })
	var acked, dedup uint64
	for i, c := range consumers {
		if err := c.stop(t); err != nil {
			t.Errorf("consumer %d: Run = %v", i, err)
		}
		st := c.c.Stats()
		acked += st.Acked
		dedup += st.Deduplicated
		if st.Delivered == 0 {
			t.Errorf("consumer %d received nothing: %+v", i, st)
		}
	}
	rows := deliveries(t, e.srv.DB, e.sub.ID)
	checkAckedOnce(t, rows, total)
	calls := handled.check(t, rows)
	if acked-dedup != total {
		t.Errorf("consumers counted %d first acknowledgements, want %d", acked-dedup, total)
	}
	t.Logf("%d handler calls for %d events", calls, total)
}

// TestE17_HandlerErrorMeansNoAck makes the handler fail the first time:
// nothing is acknowledged, the lease runs out and the event is delivered
// again with a new epoch, which the handler then acknowledges.
func TestE17_HandlerErrorMeansNoAck(t *testing.T) {
	t.Parallel()
	e := setupConsumer(t, 10,
		eventsSection(func(c *events.Config) { c.LeaseDuration = time.Second }),
		subscriptionsSection(func(c *subscriptions.Config) { c.RecoverInterval = 100 * time.Millisecond }))
	var calls atomic.Int32
	epochs := make(chan uint64, 4)
	rc := startConsumer(t, e.config(t, 1), func(_ context.Context, d *orbit.Delivery) error {
		epochs <- d.Proof.Epoch
		if calls.Add(1) == 1 {
			return errors.New("inbox unavailable")
		}
		return nil
	})
	e.produce(t, 1)
	waitUntil(t, 30*time.Second, "ACKED", func() bool { return countAcked(t, e.srv.DB, e.sub.ID) == 1 },
		func() string { return fmt.Sprint(deliveries(t, e.srv.DB, e.sub.ID)) })
	if first, second := <-epochs, <-epochs; first != 1 || second != 2 {
		t.Errorf("handled with epochs %d then %d, want 1 then 2", first, second)
	}
	rows := deliveries(t, e.srv.DB, e.sub.ID)
	checkAckedOnce(t, rows, 1)
	for _, d := range rows {
		if d.epoch != 2 {
			t.Errorf("delivery epoch %d, want 2", d.epoch)
		}
	}
	if err := rc.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := rc.c.Stats(); st.HandlerErrors != 1 || st.Acked != 1 || st.Delivered != 2 || st.LeaseLost != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// TestE17_UnconfirmedAckResentAfterReconnect loses the reply to an ACK the
// server recorded: the consumer sends the same proof again on its next
// connection and the server confirms it as deduplicated, with one audit
// record (E-10, E-17).
func TestE17_UnconfirmedAckResentAfterReconnect(t *testing.T) {
	t.Parallel()
	e := setupConsumer(t, 10)
	px := startAckCutter(t, strings.TrimPrefix(e.srv.URL, "http://"))
	var mu sync.Mutex
	var acks []ackFrame
	cfg := e.config(t, 1)
	cfg.BaseURL = px.URL()
	cfg.Trace = func(dir string, b []byte) {
		var f ackFrame
		if dir == orbit.FrameSent && json.Unmarshal(b, &f) == nil && f.Type == "event.ack" {
			mu.Lock()
			acks = append(acks, f)
			mu.Unlock()
		}
	}
	rc := startConsumer(t, cfg, func(context.Context, *orbit.Delivery) error { return nil })
	e.produce(t, 1)
	reply, ok := px.lostReply(30 * time.Second)
	if !ok {
		t.Fatal("no ACK went through the proxy")
	}
	if !strings.Contains(string(reply), `"deduplicated":false`) {
		t.Errorf("the lost reply = %s; want the first acknowledgement", reply)
	}
	waitUntil(t, 30*time.Second, "confirmed by the consumer", func() bool { return rc.c.Stats().Acked == 1 },
		func() string { return fmt.Sprintf("%+v", rc.c.Stats()) })
	if st := rc.c.Stats(); st.Deduplicated != 1 || st.Reconnects < 1 || st.Delivered != 1 {
		t.Errorf("stats = %+v; want one deduplicated confirmation after a reconnection", st)
	}
	mu.Lock()
	if len(acks) != 2 || string(acks[0].Body) != string(acks[1].Body) || acks[0].SessionID == acks[1].SessionID {
		t.Errorf("event.ack frames = %+v; want the same proof on two sessions", acks)
	}
	mu.Unlock()
	checkAckedOnce(t, deliveries(t, e.srv.DB, e.sub.ID), 1)
}

// ackFrame is the part of an event.ack frame the tests compare.
type ackFrame struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Body      json.RawMessage `json:"body"`
}

// TestE17_BoundedShutdown cancels a consumer while its handlers run: their
// contexts are cancelled, the ACKs of the handlers that still return nil
// are sent, nothing new is handed out, the connection closes and Run
// returns nil within ShutdownTimeout.
func TestE17_BoundedShutdown(t *testing.T) {
	t.Parallel()
	e := setupConsumer(t, 10)
	const bound = 3 * time.Second
	started := make(chan string, 10)
	var cancelled atomic.Int32
	cfg := e.config(t, 2)
	cfg.ShutdownTimeout = bound
	rc := startConsumer(t, cfg, func(ctx context.Context, d *orbit.Delivery) error {
		started <- d.Event.ID
		<-ctx.Done()
		cancelled.Add(1)
		return nil // the event was stored before the shutdown
	})
	e.produce(t, 3)
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the handlers did not start")
		}
	}
	begin := time.Now()
	if err := rc.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if took := time.Since(begin); took > bound {
		t.Errorf("shutdown took %s, more than ShutdownTimeout %s", took, bound)
	}
	if n := cancelled.Load(); n != 2 {
		t.Errorf("%d handler contexts cancelled, want 2", n)
	}
	select {
	case id := <-started:
		t.Errorf("event %s was handed out during the shutdown", id)
	default:
	}
	if n := countAcked(t, e.srv.DB, e.sub.ID); n != 2 {
		t.Errorf("%d deliveries ACKED, want the 2 whose handlers returned nil", n)
	}
	waitUntil(t, 10*time.Second, "closed on the server", func() bool {
		var open int
		_ = e.srv.DB.QueryRow(`SELECT COUNT(*) FROM event_sessions WHERE subscription_id = ? AND closed_at IS NULL`, e.sub.ID).Scan(&open)
		return open == 0
	}, func() string { return "an event session is still open" })
}

// TestE18_SDKFramesMatchSchema records every frame of an SDK consumer and
// connection against a real server, through delivery, ACK, heartbeat and a
// DELIVERY_LEASE_LOST error, and validates each against
// docs/api/events.schema.json.
func TestE18_SDKFramesMatchSchema(t *testing.T) {
	t.Parallel()
	v := wstest.MustLoad(t, eventsSchemaPath)
	e := setupConsumer(t, 10, eventsSection(func(c *events.Config) { c.HeartbeatInterval = 100 * time.Millisecond }))
	var mu sync.Mutex
	var frames []wstest.Record
	trace := func(dir string, b []byte) {
		var f struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &f)
		mu.Lock()
		frames = append(frames, wstest.Record{Direction: wstest.Direction(dir), Type: f.Type, Raw: b})
		mu.Unlock()
	}
	seen := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		m := map[string]bool{}
		for _, f := range frames {
			m[string(f.Direction)+" "+f.Type] = true
		}
		return m
	}
	cfg := e.config(t, 1)
	cfg.Trace = trace
	rc := startConsumer(t, cfg, func(context.Context, *orbit.Delivery) error { return nil })
	e.produce(t, 2)
	waitUntil(t, 30*time.Second, "ACKED and pinged", func() bool {
		s := seen()
		return countAcked(t, e.srv.DB, e.sub.ID) == 2 && s["sent events.ping"] && s["received ack"]
	}, func() string { return fmt.Sprint(seen()) })
	if err := rc.stop(t); err != nil {
		t.Fatal(err)
	}

	// An ACK with a wrong proof gets an error frame.
	conn, err := orbit.DialEvents(context.Background(), orbit.EventConnConfig{
		BaseURL: e.srv.URL, Token: e.cred.Token, SubscriptionID: e.sub.ID, Trace: trace,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var delivery string
	for id := range deliveries(t, e.srv.DB, e.sub.ID) {
		delivery = id
	}
	_, err = conn.Ack(context.Background(), orbit.AckProof{DeliveryID: delivery, Epoch: 1, LeaseSecret: strings.Repeat("A", 43)})
	if !orbit.IsCode(err, orbit.CodeDeliveryLeaseLost) {
		t.Fatalf("Ack with a wrong secret = %v, want DELIVERY_LEASE_LOST", err)
	}
	if _, err := conn.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	s := seen()
	for _, want := range []string{
		"sent events.hello", "received events.welcome", "received event.deliver", "sent event.ack",
		"received ack", "sent events.ping", "received error",
	} {
		if !s[want] {
			t.Errorf("no frame %q was recorded", want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range frames {
		def := wstest.ServerFrame
		if f.Direction == orbit.FrameSent {
			def = wstest.ClientFrame
		}
		if err := v.Validate(def, f.Raw); err != nil {
			t.Errorf("%s %s frame does not match the schema: %v", f.Direction, f.Type, err)
		}
	}
	t.Logf("%d frames validated against %s", len(frames), eventsSchemaPath)
}
