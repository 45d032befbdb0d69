package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// consumerCapacity is the capacity of every event consumer of the run, the
// protocol's maximum.
const consumerCapacity = orbit.MaxEventCapacity

// newClient returns an SDK client whose HTTP transport keeps enough idle
// connections for conns concurrent callers.
func (e *env) newClient(conns int) (*orbit.Client, *http.Client, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}}
	c, err := orbit.NewClient(e.url, e.cred.Token, orbit.WithHTTPClient(hc))
	return c, hc, err
}

// subscribe creates a subscription on the named queue. from nil starts
// after the head at creation; a pointer to 0 starts with the oldest event.
func (e *env) subscribe(ctx context.Context, c *orbit.Client, name, queue string, from *uint64, maxPending int) (string, error) {
	res, err := c.CreateSubscription(ctx, "bench-sub-"+name, orbit.CreateSubscriptionRequest{
		Name: name, QueueID: e.cred.Queues[queue], FromSequence: from, MaxPending: maxPending,
	})
	if err != nil {
		return "", fmt.Errorf("create subscription %s: %w", name, err)
	}
	return res.Subscription.ID, nil
}

// consumers runs SDK event consumers until stop.
type consumers struct {
	list   []*orbit.EventConsumer
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// startConsumers runs n consumers of capacity consumerCapacity on each
// subscription, all calling handler.
func (e *env) startConsumers(ctx context.Context, subscriptionIDs []string, n int, handler orbit.EventHandler) (*consumers, error) {
	return e.startConsumersAt(ctx, e.url, subscriptionIDs, n, handler)
}

// startConsumersAt is startConsumers connected to the Orbit server at url.
func (e *env) startConsumersAt(ctx context.Context, url string, subscriptionIDs []string, n int, handler orbit.EventHandler) (*consumers, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs := &consumers{cancel: cancel}
	for _, sub := range subscriptionIDs {
		for range n {
			c, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
				BaseURL: url, Token: e.cred.Token, SubscriptionID: sub, Capacity: consumerCapacity,
				Logger: e.log,
			}, handler)
			if err != nil {
				cs.stop()
				return nil, err
			}
			cs.list = append(cs.list, c)
			cs.wg.Add(1)
			go func() {
				defer cs.wg.Done()
				if err := c.Run(ctx); err != nil {
					cs.mu.Lock()
					cs.errs = append(cs.errs, err)
					cs.mu.Unlock()
				}
			}()
		}
	}
	return cs, nil
}

// acked returns the deliveries the server confirmed as acknowledged, over
// every consumer.
func (cs *consumers) acked() uint64 {
	var n uint64
	for _, c := range cs.list {
		n += c.Stats().Acked
	}
	return n
}

// stats sums the consumers' counters.
func (cs *consumers) stats() orbit.ConsumerStats {
	var s orbit.ConsumerStats
	for _, c := range cs.list {
		st := c.Stats()
		s.Delivered += st.Delivered
		s.Acked += st.Acked
		s.Deduplicated += st.Deduplicated
		s.LeaseLost += st.LeaseLost
		s.HandlerErrors += st.HandlerErrors
		s.Reconnects += st.Reconnects
	}
	return s
}

// err returns the first error a consumer stopped with.
func (cs *consumers) err() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return errors.Join(cs.errs...)
}

// stop ends every consumer and waits for them.
func (cs *consumers) stop() error {
	cs.cancel()
	cs.wg.Wait()
	return cs.err()
}

// waitAcked waits until the consumers have n acknowledgements confirmed, or
// one of them failed, or timeout passed.
func (cs *consumers) waitAcked(ctx context.Context, n uint64, timeout time.Duration) error {
	return waitFor(ctx, timeout, 5*time.Millisecond, fmt.Sprintf("%d acknowledgements (have %d)", n, cs.acked()), func() (bool, error) {
		if err := cs.err(); err != nil {
			return false, err
		}
		return cs.acked() >= n, nil
	})
}

// latencies collects commit→receive delays.
type latencies struct {
	mu   sync.Mutex
	d    []time.Duration
	seen map[string]bool
	n    atomic.Int64 // distinct events received
	dups atomic.Int64 // deliveries of an event received before
}

// add records the latency of an event's first delivery; later deliveries
// of the same event are only counted.
func (l *latencies) add(eventID string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if l.seen[eventID] {
		l.dups.Add(1)
		return
	}
	l.seen[eventID] = true
	l.d = append(l.d, d)
	l.n.Add(1)
}

// percentiles returns p50, p95, p99 and the maximum.
func (l *latencies) percentiles() (p50, p95, p99, maxD time.Duration) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return at(0.50), at(0.95), at(0.99), d[len(d)-1]
}
