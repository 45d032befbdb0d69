package subscriptions

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// distinctLeases fails the test unless the leases name n different
// deliveries.
func distinctLeases(t *testing.T, leases []Lease, n int) {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range leases {
		if seen[l.Delivery.ID] {
			t.Fatalf("delivery %s leased twice by one claim", l.Delivery.ID)
		}
		seen[l.Delivery.ID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d deliveries leased, want %d", len(seen), n)
	}
}

func TestClaim_RecoveredLeasesJoinWhatWasPickedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.appendEvents(t, 1)
	s, _, first := leased(t, f, "recovered", 1)
	f.appendEvents(t, 1)
	if created, _, err := deliveryMaterialize(ctx, f.db, f.log, s.ID, 100); err != nil || created != 1 {
		t.Fatalf("materialize: %d, %v; want 1", created, err)
	}
	// One delivery PENDING, one whose lease ran out: a claim with room for
	// both picks the first, recovers the second and leases each once.
	if _, err := f.db.Exec(`UPDATE event_deliveries SET lease_until = ? WHERE id = ?`,
		time.Now().UTC().Add(-time.Second), first[0].Delivery.ID); err != nil {
		t.Fatal(err)
	}
	session, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	distinctLeases(t, leases, 2)
}

// TestE4_ClaimsRacingOnOneSessionStayWithinItsCapacity: claims of one
// session that wait for each other's lock on its row count the leases the
// one before committed, so together they never lease beyond the capacity.
func TestE4_ClaimsRacingOnOneSessionStayWithinItsCapacity(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.backlog(t, "racing", 40)
	const capacity = 3
	session, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []Lease
	)
	for range 8 {
		wg.Go(func() {
			got, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			leases = append(leases, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	distinctLeases(t, leases, capacity)
}

// claimSession opens a session of capacity on s and returns a claim
// through floors, which fails the test unless it reports the session's
// capacity taken as wantFull says.
func claimSession(t *testing.T, f *fixture, subscriptionID string, capacity int, floors *claimFloors) func(wantFull bool) []Lease {
	t.Helper()
	ctx := context.Background()
	session, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: subscriptionID, CredentialID: f.grant.CredentialID, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return func(wantFull bool) []Lease {
		t.Helper()
		leases, full, err := deliveryClaim(ctx, f.db, f.log, f.grants, floors, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10})
		if err != nil {
			t.Fatal(err)
		}
		if full != wantFull {
			t.Fatalf("claim of %d reported its capacity taken: %v, want %v", len(leases), full, wantFull)
		}
		return leases
	}
}

// leasedSequences returns the sequences of leases, in their order.
func leasedSequences(leases []Lease) []uint64 {
	var out []uint64
	for _, l := range leases {
		out = append(out, l.Delivery.Sequence)
	}
	return out
}

// TestE8_ClaimFloorsHideNothingForLong: a claim that filled its capacity
// lets the next claims of the node look up PENDING deliveries above what
// it leased, and nothing stays hidden below that floor: a delivery made
// PENDING again on this node (madePending forgets the floor) is leased
// first, one made PENDING elsewhere is found by a claim that does not fill
// its capacity above the floor, and a floor is trusted for claimFloorTTL
// only. Each claim says whether it left the session's capacity taken.
func TestE8_ClaimFloorsHideNothingForLong(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.backlog(t, "floors", 12)
	var floors claimFloors
	first := claimSession(t, f, s.ID, 3, &floors)
	if got := leasedSequences(first(true)); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("first claim leased %v, want [1 2 3]", got)
	}
	if above, _ := floors.get(s.ID, time.Now()); above != 3 {
		t.Fatalf("floor after a filled claim %d, want 3", above)
	}
	makePending := func(seq uint64) {
		t.Helper()
		if _, err := f.db.Exec(`UPDATE event_deliveries SET state = 'PENDING', lease_until = NULL, lease_session_id = NULL
			WHERE subscription_id = ? AND sequence = ?`, s.ID, seq); err != nil {
			t.Fatal(err)
		}
	}

	// Made PENDING on this node: the floor is forgotten, the delivery
	// leased first, in sequence order.
	makePending(2)
	floors.forget(s.ID)
	second := claimSession(t, f, s.ID, 3, &floors)
	if got := leasedSequences(second(true)); !slices.Equal(got, []uint64{2, 4, 5}) {
		t.Fatalf("claim after madePending leased %v, want [2 4 5]", got)
	}

	// Made PENDING by another node: a claim that fills its capacity above
	// the floor (5) does not see it ...
	makePending(1)
	third := claimSession(t, f, s.ID, 3, &floors)
	if got := leasedSequences(third(true)); !slices.Equal(got, []uint64{6, 7, 8}) {
		t.Fatalf("claim above the floor leased %v, want [6 7 8]", got)
	}
	// ... one that does not looks below it, and leases in sequence order.
	fourth := claimSession(t, f, s.ID, 10, &floors)
	if got := leasedSequences(fourth(false)); !slices.Equal(got, []uint64{1, 9, 10, 11, 12}) {
		t.Fatalf("claim short above the floor leased %v, want [1 9 10 11 12]", got)
	}
	if above, _ := floors.get(s.ID, time.Now()); above != 0 {
		t.Fatalf("floor after a claim that did not fill %d, want none", above)
	}
	// A full session leases nothing and says so; one with a free slot
	// and nothing to claim says it is not full.
	if got := second(true); len(got) != 0 {
		t.Fatalf("a full session leased %d", len(got))
	}
	if got := first(false); len(got) != 0 {
		t.Fatalf("a session with nothing to claim leased %d", len(got))
	}

	// A floor is trusted for claimFloorTTL only.
	_, token := floors.get(s.ID, time.Now())
	set := time.Now()
	floors.set(s.ID, 9, token, set)
	if above, _ := floors.get(s.ID, set.Add(claimFloorTTL-time.Millisecond)); above != 9 {
		t.Fatalf("floor within its TTL %d, want 9", above)
	}
	if above, _ := floors.get(s.ID, set.Add(claimFloorTTL)); above != 0 {
		t.Fatalf("floor after its TTL %d, want none", above)
	}
}

// TestClaimFloors_AClaimOlderThanAForgetSetsNone: a claim that read its
// token before the floors were forgotten (one subscription's or all) may
// have looked up before a delivery became PENDING again, so its floor is
// not kept.
func TestClaimFloors_AClaimOlderThanAForgetSetsNone(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, forget := range map[string]func(f *claimFloors){
		"one": func(f *claimFloors) { f.forget("s1") },
		"all": func(f *claimFloors) { f.forgetAll() },
	} {
		t.Run(name, func(t *testing.T) {
			var f claimFloors
			_, token := f.get("s1", now)
			forget(&f)
			f.set("s1", 40, token, now)
			if above, _ := f.get("s1", now); above != 0 {
				t.Fatalf("floor %d kept from a claim older than the forget", above)
			}
			_, token = f.get("s1", now)
			f.set("s1", 40, token, now)
			if above, _ := f.get("s1", now); above != 40 {
				t.Fatalf("floor %d from a claim after the forget, want 40", above)
			}
		})
	}
	var none *claimFloors
	if above, token := none.get("s1", now); above != 0 || token != 0 {
		t.Fatalf("nil floors: %d, %d", above, token)
	}
	none.set("s1", 4, 0, now)
}
