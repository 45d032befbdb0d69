package orbit

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// memIntents is an AckIntentStore in memory, standing in for the
// receiver's database.
type memIntents struct {
	mu      sync.Mutex
	proofs  map[string]AckProof // by delivery id
	settled []AckProof
	reads   int
	fail    error // returned by AckIntents while set
}

func newMemIntents(proofs ...AckProof) *memIntents {
	m := &memIntents{proofs: map[string]AckProof{}}
	for _, p := range proofs {
		m.proofs[p.DeliveryID] = p
	}
	return m
}

func (m *memIntents) AckIntents(context.Context) ([]AckProof, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.fail != nil {
		return nil, m.fail
	}
	var out []AckProof
	for _, p := range m.proofs {
		out = append(out, p)
	}
	return out, nil
}

func (m *memIntents) AckIntentSettled(_ context.Context, p AckProof) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled = append(m.settled, p)
	if cur, ok := m.proofs[p.DeliveryID]; ok && cur.Epoch <= p.Epoch {
		delete(m.proofs, p.DeliveryID)
	}
	return nil
}

func (m *memIntents) add(p AckProof) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.proofs[p.DeliveryID] = p
}

func (m *memIntents) setFail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

func (m *memIntents) state() (left, settled, reads int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.proofs), len(m.settled), m.reads
}

func proofOf(id string, epoch uint64) AckProof {
	return AckProof{DeliveryID: id, Epoch: epoch, LeaseSecret: secretOf(id, epoch)}
}

// K-13: stored ACK intents are sent first on the first connection, before
// any delivery is handled, and each is reported settled once answered.
func TestK13_StoredAckIntentsAreSentFirstAndSettled(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	store := newMemIntents(proofOf(idOf("3"), 1))
	h, got := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{AckIntents: store}, h)
	fc := s.accept()
	fc.welcomeEvents(idOf("4"), longBeat)
	ack := fc.expect(frameEventAck)
	if string(ack.Body) != ackJSON(idOf("3"), 1) {
		t.Fatalf("first frame after the welcome = event.ack %s, want the stored proof", ack.Body)
	}
	fc.ackReply(ack, idOf("4"), false)
	waitFor(t, "the intent settled", func() bool { left, settled, _ := store.state(); return left == 0 && settled == 1 })

	// A delivery handled now is settled too when its ACK is answered: the
	// handler is where a receiver stores the intent.
	fc.deliver(idOf("4"), idOf("5"), 2, testEventID)
	d := receive(t, got)
	store.add(d.Proof)
	ack = fc.expect(frameEventAck)
	fc.ackReply(ack, idOf("4"), false)
	waitFor(t, "the handler's intent settled", func() bool { left, settled, _ := store.state(); return left == 0 && settled == 2 })
	if st := rc.c.Stats(); st.Acked != 2 || st.Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// K-13: intents are read again before every reconnection; a refused proof
// (a newer lease replaced it) is settled too, and its delivery is not
// counted as acknowledged.
func TestK13_AckIntentsAreReadAgainOnReconnect(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	store := newMemIntents()
	h, _ := ackingHandler()
	rc := startConsumer(t, s, EventConsumerConfig{AckIntents: store}, h)
	first := s.accept()
	first.welcomeEvents(idOf("4"), longBeat)
	// Another process of the same receiver committed and died meanwhile.
	store.add(proofOf(idOf("6"), 3))
	first.drop()

	second := s.accept()
	second.welcomeEvents(idOf("5"), longBeat)
	ack := second.expect(frameEventAck)
	if string(ack.Body) != ackJSON(idOf("6"), 3) {
		t.Fatalf("event.ack after the reconnect = %s, want the stored proof", ack.Body)
	}
	second.sendError(ack.MessageID, idOf("5"), CodeDeliveryLeaseLost)
	waitFor(t, "the refused intent settled", func() bool { left, settled, _ := store.state(); return left == 0 && settled == 1 })
	if st := rc.c.Stats(); st.Acked != 0 || st.LeaseLost != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// K-13: while the intents cannot be read, the consumer does not connect
// (it would otherwise take new deliveries before the owed ACKs), and it
// retries.
func TestK13_UnreadableIntentsDelayTheConnection(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	store := newMemIntents(proofOf(idOf("3"), 1))
	store.setFail(errors.New("receiver database unavailable"))
	h, _ := ackingHandler()
	startConsumer(t, s, EventConsumerConfig{AckIntents: store}, h)
	waitFor(t, "read several times", func() bool { _, _, reads := store.state(); return reads >= 3 })
	if n := len(s.attemptTimes()); n != 0 {
		t.Fatalf("%d connection attempts while the intents were unreadable", n)
	}
	store.setFail(nil)
	fc := s.accept()
	fc.welcomeEvents(idOf("4"), longBeat)
	if ack := fc.expect(frameEventAck); string(ack.Body) != ackJSON(idOf("3"), 1) {
		t.Errorf("event.ack = %s, want the stored proof", ack.Body)
	}
}
