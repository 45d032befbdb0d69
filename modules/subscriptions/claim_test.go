package subscriptions

import (
	"context"
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
	f.appendEvents(t, 40)
	s := f.create(t, "racing", nil, zero(), 100)
	if _, _, err := deliveryMaterialize(ctx, f.db, f.log, s.ID, 100); err != nil {
		t.Fatal(err)
	}
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
