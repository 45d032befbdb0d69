package events

import (
	"context"
	"errors"
	"sync"

	"github.com/orbitrun/orbit/internal/httpx"
)

// errClaimPoolFull is returned when a node already has as many claims
// waiting and in flight as it admits; the connection tries again at its next
// wake-up.
var errClaimPoolFull = httpx.Errorf(httpx.CodeCapacityExceeded, "too many claims waiting on this node")

// claimPool admits claims on a node (E-6): at most maxInFlight run at once,
// at most perApp of them for one application, and at most maxQueued wait or
// run in total. Waiting claims are served round-robin, first across
// applications and then, within an application, across subscriptions, so a
// busy tenant cannot starve a quiet one. Each scheduling round starts at most
// perRound claims. These are protections of the node; MySQL still decides
// which deliveries each claim gets.
type claimPool struct {
	maxInFlight, perApp, maxQueued, perRound int

	mu       sync.Mutex
	inFlight int
	queued   int // waiting and in flight
	apps     []*appQueue
	byApp    map[string]*appQueue
	next     int // index in apps of the next application to serve
}

type appQueue struct {
	id       string
	inFlight int
	subs     []*subQueue
	bySub    map[string]*subQueue
	next     int
}

type subQueue struct {
	id      string
	waiting []chan struct{}
}

// newClaimPool returns a pool with the given bounds.
func newClaimPool(maxInFlight, perApp, maxQueued, perRound int) *claimPool {
	return &claimPool{maxInFlight: maxInFlight, perApp: perApp, maxQueued: maxQueued, perRound: perRound, byApp: map[string]*appQueue{}}
}

// acquire waits for a claim slot for a subscription of an application and
// returns the function that frees it, which must be called exactly once. It
// returns ErrClaimPoolFull at once when the node admits no more claims, and
// ctx's error when ctx ends first.
func (p *claimPool) acquire(ctx context.Context, appID, subscriptionID string) (func(), error) {
	ready := make(chan struct{})
	p.mu.Lock()
	if p.queued >= p.maxQueued {
		p.mu.Unlock()
		return nil, errClaimPoolFull
	}
	p.queued++
	a := p.byApp[appID]
	if a == nil {
		a = &appQueue{id: appID, bySub: map[string]*subQueue{}}
		p.byApp[appID] = a
		p.apps = append(p.apps, a)
	}
	s := a.bySub[subscriptionID]
	if s == nil {
		s = &subQueue{id: subscriptionID}
		a.bySub[subscriptionID] = s
		a.subs = append(a.subs, s)
	}
	s.waiting = append(s.waiting, ready)
	p.schedule()
	p.mu.Unlock()

	release := func() {
		p.mu.Lock()
		p.inFlight--
		p.queued--
		a.inFlight--
		p.forgetIfIdle(a)
		p.schedule()
		p.mu.Unlock()
	}
	select {
	case <-ready:
		return release, nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-ready:
			// Granted while giving up: hand the slot back.
			p.inFlight--
			p.queued--
			a.inFlight--
			p.forgetIfIdle(a)
			p.schedule()
		default:
			p.queued--
			s.remove(ready)
			p.forgetIfIdle(a)
		}
		return nil, ctx.Err()
	}
}

// schedule grants waiting claims while slots are free, at most perRound of
// them, round-robin by application and then subscription. p.mu is held.
func (p *claimPool) schedule() {
	started := 0
	for started < p.perRound && p.inFlight < p.maxInFlight {
		a := p.nextApp()
		if a == nil {
			return
		}
		s := a.nextSub()
		ready := s.waiting[0]
		s.waiting = s.waiting[1:]
		a.inFlight++
		p.inFlight++
		started++
		close(ready)
	}
}

// nextApp returns the next application, in round-robin order, that has a
// waiting claim and room under its per-application bound, or nil.
func (p *claimPool) nextApp() *appQueue {
	for i := 0; i < len(p.apps); i++ {
		a := p.apps[(p.next+i)%len(p.apps)]
		if a.inFlight < p.perApp && a.hasWaiting() {
			p.next = (p.next + i + 1) % len(p.apps)
			return a
		}
	}
	return nil
}

func (a *appQueue) hasWaiting() bool {
	for _, s := range a.subs {
		if len(s.waiting) > 0 {
			return true
		}
	}
	return false
}

// nextSub returns the next subscription, in round-robin order, with a
// waiting claim. The caller checked that one exists.
func (a *appQueue) nextSub() *subQueue {
	for i := 0; i < len(a.subs); i++ {
		s := a.subs[(a.next+i)%len(a.subs)]
		if len(s.waiting) > 0 {
			a.next = (a.next + i + 1) % len(a.subs)
			return s
		}
	}
	panic(errors.New("events: claim pool: no waiting subscription"))
}

func (s *subQueue) remove(ready chan struct{}) {
	for i, c := range s.waiting {
		if c == ready {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return
		}
	}
}

// forgetIfIdle drops the queues of an application with nothing waiting or
// running, so the pool does not grow with every application ever seen.
// p.mu is held.
func (p *claimPool) forgetIfIdle(a *appQueue) {
	if a.inFlight > 0 || a.hasWaiting() {
		return
	}
	delete(p.byApp, a.id)
	for i, x := range p.apps {
		if x == a {
			p.apps = append(p.apps[:i], p.apps[i+1:]...)
			if p.next > i {
				p.next--
			}
			break
		}
	}
	if len(p.apps) == 0 {
		p.next = 0
	} else {
		p.next %= len(p.apps)
	}
}

// stats returns the claims in flight and waiting plus in flight.
func (p *claimPool) stats() (inFlight, queued int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight, p.queued
}
