package subscriptions

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/admin"
)

// leased creates a subscription to the whole log of f's queue, materialises
// its deliveries and leases all of them to one new session, in sequence
// order. It returns the subscription, the session and the leases.
func leased(t *testing.T, f *fixture, name string, n int) (*Subscription, string, []Lease) {
	t.Helper()
	ctx := context.Background()
	s := f.create(t, name, nil, zero(), 100)
	if created, _, err := deliveryMaterialize(ctx, f.db, f.log, s.ID, 100); err != nil || created != n {
		t.Fatalf("materialize: %d deliveries, %v; want %d", created, err, n)
	}
	session, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: n})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10})
	if err != nil || len(leases) != n {
		t.Fatalf("claim: %d leases, %v; want %d", len(leases), err, n)
	}
	return s, session, leases
}

// proof is the ACK a lease's holder sends.
func proof(f *fixture, s *Subscription, session string, l Lease) *DeliveryAckParams {
	return &DeliveryAckParams{Grant: f.grant, SubscriptionID: s.ID, DeliveryID: l.Delivery.ID, Epoch: l.Delivery.LeaseEpoch, Secret: l.Secret, SessionID: session}
}

// wantStates fails the test unless each delivery of s is in the state given.
func wantStates(t *testing.T, f *fixture, s *Subscription, want map[string]string) {
	t.Helper()
	for id, state := range want {
		d, err := deliveryGet(context.Background(), f.db, s.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != state {
			t.Errorf("delivery %s is %s, want %s", id, d.State, state)
		}
	}
}

func TestAckBatch_SameProofTwiceIsDeduplicated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 1)
	s, session, leases := leased(t, f, "dup", 1)
	p := proof(f, s, session, leases[0])
	again := *p
	out, err := deliveryAckBatch(context.Background(), f.db, f.grants, []*DeliveryAckParams{p, &again})
	if err != nil {
		t.Fatal(err)
	}
	first, second := out[0], out[1]
	if first.Err != nil || first.Result.Deduplicated || first.Result.AcknowledgedAt == "" {
		t.Fatalf("first ack: %+v; want acknowledged, not deduplicated", first)
	}
	want := first.Result
	want.Deduplicated = true
	if second.Err != nil || second.Result != want {
		t.Fatalf("second ack: %+v; want %+v", second, want)
	}
	var records int
	if err := f.db.QueryRow(`SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, p.DeliveryID).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 1 {
		t.Fatalf("%d ack records, want 1", records)
	}
	wantStates(t, f, s, map[string]string{p.DeliveryID: StateAcked})
}

func TestAckBatch_RefusedProofDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 3)
	s, session, leases := leased(t, f, "refused", 3)
	ctx := context.Background()
	// The third lease runs out and a second session re-leases it (epoch 2),
	// so its first proof is superseded.
	if _, err := f.db.Exec(`UPDATE event_deliveries SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), leases[2].Delivery.ID); err != nil {
		t.Fatal(err)
	}
	other, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if re, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: other, LeaseDuration: time.Minute, RecoverBatch: 10}); err != nil || len(re) != 1 || re[0].Delivery.LeaseEpoch != 2 {
		t.Fatalf("re-lease: %+v %v; want the expired delivery at epoch 2", re, err)
	}
	valid := proof(f, s, session, leases[0])
	wrongSecret := proof(f, s, session, leases[1])
	wrongSecret.Secret = strings.Repeat("A", len(wrongSecret.Secret))
	stale := proof(f, s, session, leases[2])
	out, err := deliveryAckBatch(ctx, f.db, f.grants, []*DeliveryAckParams{wrongSecret, valid, stale})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != ErrLeaseLost || out[1].Err != nil || out[2].Err != ErrLeaseLost {
		t.Fatalf("errors %v, %v, %v; want lease lost, nil, lease lost", out[0].Err, out[1].Err, out[2].Err)
	}
	wantStates(t, f, s, map[string]string{
		valid.DeliveryID:       StateAcked,
		wrongSecret.DeliveryID: stateLeased,
		stale.DeliveryID:       stateLeased,
	})
}

// TestAckBatch_ProofForAnotherSubscriptionsDeliveryIsNotFound: a delivery
// outside the ACK's subscription is NOT_FOUND (seed 001 §7), whatever the
// proof, and the other ACKs of the batch are recorded.
func TestAckBatch_ProofForAnotherSubscriptionsDeliveryIsNotFound(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 1)
	a, sessionA, leasesA := leased(t, f, "a", 1)
	b, sessionB, leasesB := leased(t, f, "b", 1)
	// b's delivery, with b's own valid proof, acknowledged as a's.
	foreign := proof(f, b, sessionB, leasesB[0])
	foreign.SubscriptionID = a.ID
	own := proof(f, a, sessionA, leasesA[0])
	out, err := deliveryAckBatch(context.Background(), f.db, f.grants, []*DeliveryAckParams{foreign, own})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != errDeliveryNotFound || out[1].Err != nil {
		t.Fatalf("errors %v, %v; want not found for the foreign delivery only", out[0].Err, out[1].Err)
	}
	wantStates(t, f, a, map[string]string{own.DeliveryID: StateAcked})
	wantStates(t, f, b, map[string]string{foreign.DeliveryID: stateLeased})
}

func TestAckBatch_OutcomesFollowTheInputOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 4)
	s, session, leases := leased(t, f, "order", 4)
	acks := make([]*DeliveryAckParams, 0, len(leases))
	for _, l := range leases {
		acks = append(acks, proof(f, s, session, l))
	}
	// Deliveries are locked in id order; the input runs the other way, and
	// one proof in the middle is refused.
	slices.SortFunc(acks, func(x, y *DeliveryAckParams) int { return strings.Compare(y.DeliveryID, x.DeliveryID) })
	acks[1].Epoch++
	out, err := deliveryAckBatch(context.Background(), f.db, f.grants, acks)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(acks) {
		t.Fatalf("%d outcomes for %d acks", len(out), len(acks))
	}
	for i, o := range out {
		if i == 1 {
			if o.Err != ErrLeaseLost {
				t.Errorf("outcome 1: %v, want lease lost", o.Err)
			}
			continue
		}
		if o.Err != nil || o.Result.DeliveryID != acks[i].DeliveryID {
			t.Errorf("outcome %d: %+v; want the ACK of delivery %s", i, o, acks[i].DeliveryID)
		}
	}
}

// TestAckBatch_GrantIsCheckedInTheBatch: an ACK whose credential was
// revoked after its lease records nothing and gets the error of
// the admin module's CheckGrants; so does the next claim, which leases nothing.
func TestAckBatch_GrantIsCheckedInTheBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.appendEvents(t, 1)
	s, session, leases := leased(t, f, "revoked", 1)
	if err := admin.NewStore(f.db).CredentialRevoke(ctx, f.grant.CredentialID, "test"); err != nil {
		t.Fatal(err)
	}
	out, err := deliveryAckBatch(ctx, f.db, f.grants, []*DeliveryAckParams{proof(f, s, session, leases[0])})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != auth.ErrUnauthenticated {
		t.Fatalf("ACK after revocation: %v, want UNAUTHENTICATED", out[0].Err)
	}
	wantStates(t, f, s, map[string]string{leases[0].Delivery.ID: stateLeased})
	other, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: other, LeaseDuration: time.Minute, RecoverBatch: 10}); !auth.IsGrantError(err) || len(got) != 0 {
		t.Fatalf("claim after revocation: %d leases, %v; want UNAUTHENTICATED", len(got), err)
	}
}
