package events

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/metrics"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// eventMetrics are the events module's metrics.
type eventMetrics struct {
	ackSeconds     prometheus.Histogram
	resultDelivery prometheus.Histogram
	claimSeconds   prometheus.Histogram
	claimWait      prometheus.Histogram
}

func newEventMetrics(reg *metrics.Registry, pool *claimPool) *eventMetrics {
	reg.GaugeFunc("claim_pool_waiting", "Claims waiting for a slot of this node's claim pool.", nil, func() float64 {
		inFlight, queued := pool.stats()
		return float64(queued - inFlight)
	})
	return &eventMetrics{
		ackSeconds: reg.Histogram("delivery_ack_seconds",
			"Time from sending event.deliver to the first valid ACK of that lease, on the connection it was sent on.", metrics.Seconds),
		resultDelivery: reg.Histogram("result_delivery_seconds",
			"Time from a result's commit to the first event.deliver of it to a subscription.", metrics.Seconds),
		claimSeconds: reg.Histogram("claim_seconds",
			"Duration of one claim (materialisation when polling, and the leasing transaction), after its slot in the claim pool.", metrics.Seconds),
		claimWait: reg.Histogram("claim_wait_seconds",
			"Time a claim waited for its slot in this node's claim pool (E-6: claims in flight, of one application and in all).", metrics.Seconds),
	}
}

// sentLeases remembers when the session sent each lease it holds, so that
// its ACK can be timed. It holds at most the session's capacity of leases
// that can still be ACKed, plus those whose lease ran out unacknowledged,
// which are dropped once they are older than keep.
type sentLeases struct {
	mu   sync.Mutex
	at   map[string]time.Time // delivery id -> time event.deliver was sent
	keep time.Duration
}

func newSentLeases(keep time.Duration) *sentLeases {
	return &sentLeases{at: map[string]time.Time{}, keep: keep}
}

// sent records that the lease of a delivery was sent now.
func (s *sentLeases) sent(deliveryID string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.at {
		if now.Sub(at) > s.keep {
			delete(s.at, id)
		}
	}
	s.at[deliveryID] = now
}

// acked returns how long ago the delivery's lease was sent and forgets it;
// false when this session did not send it (or forgot it).
func (s *sentLeases) acked(deliveryID string, now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[deliveryID]
	delete(s.at, deliveryID)
	return now.Sub(at), ok
}

// delivered records the metrics of an event.deliver just written: the
// time from the result's commit when it is the delivery's first attempt.
func (m *eventMetrics) delivered(l *subscriptions.Lease, now time.Time) {
	if l.Delivery.Attempts != 1 || l.Event.Type == tasks.EventRequeued {
		return
	}
	if occurred, err := time.Parse(time.RFC3339Nano, l.Event.OccurredAt); err == nil {
		m.resultDelivery.Observe(max(0, now.Sub(occurred).Seconds()))
	}
}
