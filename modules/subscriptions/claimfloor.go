package subscriptions

import (
	"sync"
	"time"
)

// claimFloorTTL is how long a claim floor is trusted. It bounds how late a
// claim on this node sees a delivery the floor hides: one that a claim
// rolling back had locked, one whose NACK or retry delay ran out after the
// floor was set, or one another node made PENDING again.
const claimFloorTTL = 200 * time.Millisecond

// claimFloors remembers, per subscription, the sequence at which a recent
// claim of this node filled its capacity: below it that claim left nothing
// it could lease, so the claims that follow look up PENDING deliveries
// above it. A claim that starts at the beginning of a subscription's
// PENDING range walks the claim index's entries of the deliveries leased
// just before, which InnoDB keeps, delete-marked, until it purges them: a
// draining backlog's claim of 32 took 4.4 ms of the database's time that
// way, 1.0 ms from the floor. A floor only narrows where a claim looks
// first: a claim that does not fill its capacity above it looks again from
// the beginning.
//
// A floor is set only by a committed claim that filled its capacity, is
// trusted for claimFloorTTL, and is forgotten when this node makes
// deliveries of the subscription PENDING again (madePending); a claim that
// read the floors before such a change does not set one.
type claimFloors struct {
	mu    sync.Mutex
	clock uint64 // counts forgets; claims read it as their token
	all   uint64 // clock at the last forgetAll
	bySub map[string]claimFloor
}

type claimFloor struct {
	above  uint64    // claims look up sequences above it; 0 for none
	at     time.Time // when it was set
	forgot uint64    // clock at the subscription's last forget
}

// get returns the floor of a subscription, 0 when it has none or it is
// older than claimFloorTTL, and the token the claim passes to set. A nil
// *claimFloors keeps none: every claim looks up from the beginning.
func (f *claimFloors) get(subscriptionID string, now time.Time) (above, token uint64) {
	if f == nil {
		return 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.bySub[subscriptionID]
	if c.above == 0 || now.Sub(c.at) >= claimFloorTTL {
		return 0, f.clock
	}
	return c.above, f.clock
}

// set records the floor a committed claim found (0 clears it), unless the
// subscription's floors were forgotten after the claim read its token.
func (f *claimFloors) set(subscriptionID string, above, token uint64, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.bySub[subscriptionID]
	if token < c.forgot || token < f.all {
		return
	}
	if f.bySub == nil {
		f.bySub = map[string]claimFloor{}
	}
	f.bySub[subscriptionID] = claimFloor{above: above, at: now, forgot: c.forgot}
}

// forget drops the floors of the given subscriptions.
func (f *claimFloors) forget(subscriptionIDs ...string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock++
	if f.bySub == nil {
		f.bySub = map[string]claimFloor{}
	}
	for _, id := range subscriptionIDs {
		f.bySub[id] = claimFloor{forgot: f.clock}
	}
}

// forgetAll drops every floor.
func (f *claimFloors) forgetAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock++
	f.all = f.clock
	clear(f.bySub)
}

// drop removes what is kept for a deleted subscription.
func (f *claimFloors) drop(subscriptionID string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.bySub, subscriptionID)
}
