package events

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
)

// poolBound limits every wait for a claim that is due.
const poolBound = 5 * time.Second

// grant is the outcome of an Acquire run in the background.
type grant struct {
	label   string
	release func()
	err     error
}

// acquire runs Acquire in a goroutine and delivers its outcome on the
// returned channel.
func acquire(ctx context.Context, p *claimPool, app, sub string) <-chan grant {
	out := make(chan grant, 1)
	go func() {
		release, err := p.acquire(ctx, app, sub)
		out <- grant{label: app + "/" + sub, release: release, err: err}
	}()
	return out
}

// waitQueued waits until the pool holds n claims waiting or in flight.
// Acquire decides under the pool's lock, so once a claim is counted its
// grant (or wait) is decided too.
func waitQueued(t *testing.T, p *claimPool, n int) {
	t.Helper()
	deadline := time.Now().Add(poolBound)
	for {
		if _, queued := p.stats(); queued == n {
			return
		}
		if time.Now().After(deadline) {
			_, queued := p.stats()
			t.Fatalf("%d claims queued, want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// granted returns the outcome of a claim that must be granted.
func granted(t *testing.T, c <-chan grant) grant {
	t.Helper()
	select {
	case g := <-c:
		if g.err != nil {
			t.Fatalf("claim %s: %v", g.label, g.err)
		}
		return g
	case <-time.After(poolBound):
		t.Fatalf("claim not granted within %s", poolBound)
		return grant{}
	}
}

// waiting checks that a claim has not been granted.
func waiting(t *testing.T, c <-chan grant) {
	t.Helper()
	select {
	case g := <-c:
		t.Fatalf("claim %s granted (err %v), want it waiting", g.label, g.err)
	default:
	}
}

// wantStats checks the pool's counters.
func wantStats(t *testing.T, p *claimPool, inFlight, queued int) {
	t.Helper()
	if f, q := p.stats(); f != inFlight || q != queued {
		t.Fatalf("in flight %d, queued %d; want %d and %d", f, q, inFlight, queued)
	}
}

// TestE6_ClaimPoolInFlightBound: at most maxInFlight claims run at once;
// a freed slot goes to a waiting claim.
func TestE6_ClaimPoolInFlightBound(t *testing.T) {
	t.Parallel()
	p := newClaimPool(2, 2, 128, 4)
	ctx := context.Background()
	a := granted(t, acquire(ctx, p, "a", "s"))
	b := granted(t, acquire(ctx, p, "b", "s"))
	c := acquire(ctx, p, "c", "s")
	waitQueued(t, p, 3)
	wantStats(t, p, 2, 3)
	waiting(t, c)
	a.release()
	cg := granted(t, c)
	wantStats(t, p, 2, 2)
	b.release()
	cg.release()
	wantStats(t, p, 0, 0)
}

// TestE6_ClaimPoolPerAppBound: one application holds at most perApp claims
// in flight, while other applications still get free slots.
func TestE6_ClaimPoolPerAppBound(t *testing.T) {
	t.Parallel()
	p := newClaimPool(4, 1, 128, 4)
	ctx := context.Background()
	a1 := granted(t, acquire(ctx, p, "a", "s1"))
	a2 := acquire(ctx, p, "a", "s2")
	waitQueued(t, p, 2)
	waiting(t, a2)
	b := granted(t, acquire(ctx, p, "b", "s1"))
	wantStats(t, p, 2, 3)
	waiting(t, a2)
	a1.release()
	granted(t, a2).release()
	b.release()
	wantStats(t, p, 0, 0)
}

// TestE6_ClaimPoolQueueBound: a claim beyond maxQueued (waiting plus in
// flight) is refused at once with ErrClaimPoolFull; a claim that gives up
// makes room again.
func TestE6_ClaimPoolQueueBound(t *testing.T) {
	t.Parallel()
	p := newClaimPool(1, 1, 3, 4)
	ctx := context.Background()
	a := granted(t, acquire(ctx, p, "a", "s"))
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w1 := acquire(waitCtx, p, "b", "s")
	w2 := acquire(ctx, p, "c", "s")
	waitQueued(t, p, 3)

	release, err := p.acquire(ctx, "d", "s")
	if !errors.Is(err, errClaimPoolFull) || release != nil {
		t.Fatalf("claim over the bound: %v", err)
	}
	var he *httpx.Error
	if !errors.As(err, &he) || he.Code != httpx.CodeCapacityExceeded {
		t.Fatalf("ErrClaimPoolFull is %v, want a CAPACITY_EXCEEDED error", err)
	}
	wantStats(t, p, 1, 3)

	cancel()
	if g := <-w1; !errors.Is(g.err, context.Canceled) {
		t.Fatalf("cancelled claim: %v", g.err)
	}
	d := acquire(ctx, p, "d", "s")
	waitQueued(t, p, 3)
	a.release()
	granted(t, w2).release()
	granted(t, d).release()
	wantStats(t, p, 0, 0)
}

// TestE6_ClaimPoolRoundRobin: waiting claims are served round-robin across
// applications, and within an application across its subscriptions, so a
// busy application or subscription cannot starve the others.
func TestE6_ClaimPoolRoundRobin(t *testing.T) {
	t.Parallel()
	p := newClaimPool(1, 1, 128, 4)
	ctx := context.Background()
	holder := granted(t, acquire(ctx, p, "x", "s"))
	// Queued in this order: a/s1 twice, then a/s2, then b/s1.
	var waiters []<-chan grant
	for i, k := range [][2]string{{"a", "s1"}, {"a", "s1"}, {"a", "s2"}, {"b", "s1"}} {
		waiters = append(waiters, acquire(ctx, p, k[0], k[1]))
		waitQueued(t, p, i+2)
	}
	merged := make(chan grant, len(waiters))
	var wg sync.WaitGroup
	for _, w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			merged <- <-w
		}()
	}
	holder.release()
	var order []string
	for range waiters {
		g := granted(t, merged)
		order = append(order, g.label)
		// Only one claim runs at a time, so the next grant waits for
		// this release.
		wantStats(t, p, 1, len(waiters)-len(order)+1)
		g.release()
	}
	wg.Wait()
	want := []string{"a/s1", "b/s1", "a/s2", "a/s1"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("grant order %v, want %v", order, want)
		}
	}
	wantStats(t, p, 0, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.apps) != 0 || len(p.byApp) != 0 {
		t.Fatalf("the pool keeps %d idle applications", len(p.apps))
	}
}

// TestE6_ClaimPoolPerRoundBound: one scheduling round starts at most
// perRound claims even when more slots are free; the next round starts the
// rest.
func TestE6_ClaimPoolPerRoundBound(t *testing.T) {
	t.Parallel()
	p := newClaimPool(8, 8, 128, 2)
	ctx := context.Background()
	// No slot while the claims queue up, so that one round finds all
	// five waiting.
	p.mu.Lock()
	p.maxInFlight = 0
	p.mu.Unlock()
	var waiters []<-chan grant
	for i := range 5 {
		waiters = append(waiters, acquire(ctx, p, "a", "s"))
		waitQueued(t, p, i+1)
	}
	p.mu.Lock()
	p.maxInFlight = 8
	p.schedule()
	p.mu.Unlock()
	wantStats(t, p, 2, 5)

	first := granted(t, waiters[0])
	granted(t, waiters[1]).release() // the release runs the next round
	wantStats(t, p, 3, 4)
	first.release()
	wantStats(t, p, 3, 3)
	for _, w := range waiters[2:] {
		granted(t, w).release()
	}
	wantStats(t, p, 0, 0)
}

// TestE6_ClaimPoolCancelWhileWaiting: a waiting claim whose context ends
// returns the context's error and leaves nothing behind, including when the
// slot was granted while it gave up.
func TestE6_ClaimPoolCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	p := newClaimPool(1, 1, 128, 4)
	ctx := context.Background()

	a := granted(t, acquire(ctx, p, "a", "s"))
	waitCtx, cancel := context.WithCancel(ctx)
	w := acquire(waitCtx, p, "b", "s")
	waitQueued(t, p, 2)
	cancel()
	select {
	case g := <-w:
		if !errors.Is(g.err, context.Canceled) || g.release != nil {
			t.Fatalf("cancelled claim: %v", g.err)
		}
	case <-time.After(poolBound):
		t.Fatal("a cancelled claim kept waiting")
	}
	wantStats(t, p, 1, 1)
	a.release()
	wantStats(t, p, 0, 0)

	// A release and a cancellation racing: whichever wins, the slot is
	// not lost.
	for range 200 {
		holder := granted(t, acquire(ctx, p, "a", "s"))
		waitCtx, cancel := context.WithCancel(ctx)
		w := acquire(waitCtx, p, "b", "s")
		waitQueued(t, p, 2)
		go holder.release()
		cancel()
		select {
		case g := <-w:
			if g.err == nil {
				g.release()
			} else if !errors.Is(g.err, context.Canceled) {
				t.Fatal(g.err)
			}
		case <-time.After(poolBound):
			t.Fatal("claim neither granted nor cancelled")
		}
		waitQueued(t, p, 0)
		wantStats(t, p, 0, 0)
	}
	granted(t, acquire(ctx, p, "c", "s")).release()
}

// TestE6_NodeProtectionDefaults: the node protections default to the
// values of E-6 and E-14.
func TestE6_NodeProtectionDefaults(t *testing.T) {
	t.Parallel()
	m := (&Module{}).OrbitModule().New().(*Module)
	c := m.Config().(*Config)
	got := []any{c.MaxConnections, c.ClaimsInFlight, c.ClaimsPerApp, c.ClaimsQueued, c.ClaimsPerRound, c.ReadQueue, c.WriteQueue,
		c.LeaseDuration, c.HeartbeatInterval, c.HelloTimeout, c.IdleTimeout, c.WriteTimeout}
	want := []any{128, 4, 1, 128, 4, 4, 8,
		30 * time.Second, 15 * time.Second, 5 * time.Second, 60 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("defaults %v, want %v", got, want)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}
