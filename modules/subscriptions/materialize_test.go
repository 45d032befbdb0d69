package subscriptions

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/tasks"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	db *sql.DB
	// log is the tasks store's result log, as the tasks module offers it.
	log   Log
	scope admin.Scope
	// grant is a real credential's consume grant on the queue, which
	// claims and ACKs check.
	grant auth.Grant
	// grants checks grants as the admin module does.
	grants auth.GrantChecker
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := testdb.New(t)
	sc, err := admin.NewStore(pool).ScopeEnsure(context.Background(), &admin.ScopeEnsureParams{
		Namespace: "ns", Application: "app", Environment: "env", Queue: "q",
	})
	if err != nil {
		t.Fatal(err)
	}
	cred, _, err := admin.NewStore(pool).CredentialCreate(context.Background(), &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "consumer", Permissions: []string{auth.PermEventsConsume}, Queues: []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	grant := auth.Grant{CredentialID: cred.ID, Permission: auth.PermEventsConsume, QueueID: sc.QueueID, What: "subscription"}
	return &fixture{db: pool, log: tasks.NewStore(pool, admin.NewStore(pool), time.Second, time.Minute), scope: sc, grant: grant, grants: admin.NewStore(pool)}
}

// appendEvents writes n events straight into the queue's log, cycling
// through the four result types, much faster than driving tasks.
func (f *fixture) appendEvents(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	const chunk = 500
	for start := 0; start < n; start += chunk {
		err := db.Tx(ctx, f.db, func(tx *sql.Tx) error {
			var head uint64
			err := tx.QueryRowContext(ctx, `SELECT head_sequence FROM queue_streams WHERE queue_id = ? FOR UPDATE`, f.scope.QueueID).Scan(&head)
			if err == sql.ErrNoRows {
				if _, err := tx.ExecContext(ctx, `INSERT INTO queue_streams (queue_id, head_sequence, updated_at) VALUES (?, 0, ?)`, f.scope.QueueID, db.Now()); err != nil {
					return err
				}
			} else if err != nil {
				return err
			}
			var values []string
			var args []any
			for i := 0; i < chunk && start+i < n; i++ {
				head++
				values = append(values, "(?, ?, ?, ?, ?, 2, ?, '{}', '{}')")
				args = append(args, f.scope.QueueID, head, db.NewID(), tasks.ResultTypes[int(head)%4], db.NewID(), db.Now())
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO result_events (queue_id, sequence, id, type, task_id, task_revision, occurred_at, details, snapshot) VALUES `+strings.Join(values, ","), args...); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `UPDATE queue_streams SET head_sequence = ? WHERE queue_id = ?`, head, f.scope.QueueID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// backlog appends n events and returns a new subscription to every result
// from sequence 0 (max_pending 100) with a PENDING delivery of each.
func (f *fixture) backlog(t *testing.T, name string, n int) *Subscription {
	t.Helper()
	f.appendEvents(t, n)
	s := f.create(t, name, nil, zero(), 100)
	if created, _, err := deliveryMaterialize(context.Background(), f.db, f.log, s.ID, 100); err != nil || created != n {
		t.Fatalf("materialize: %d, %v; want %d", created, err, n)
	}
	return s
}

func (f *fixture) create(t *testing.T, name string, types []string, from *uint64, maxPending int) *Subscription {
	t.Helper()
	var s *Subscription
	err := db.Tx(context.Background(), f.db, func(tx *sql.Tx) error {
		var err error
		s, err = subscriptionCreate(context.Background(), tx, f.log, &subscriptionCreateParams{
			NamespaceID: f.scope.NamespaceID, QueueID: f.scope.QueueID, CredentialID: f.grant.CredentialID, Name: name,
			Types: types, FromSequence: from, MaxPending: maxPending, MaxAttempts: 3,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func zero() *uint64 { var z uint64; return &z }

func TestS23_ConcurrentMaterializersCreateEachDeliveryOnceAndStopAtMaxPending(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 5000)
	// All four types, a backlog bound below the log: the scan must stop at
	// max_pending exactly, with the cursor just before the first event that
	// did not fit.
	bounded := f.create(t, "bounded", nil, zero(), 1000)
	// Only task.failed, unbounded enough to take all its events.
	failed := f.create(t, "failed-only", []string{tasks.EventFailed}, zero(), 1000)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 8; i++ {
		for _, id := range []string{bounded.ID, failed.ID} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, more, err := deliveryMaterialize(context.Background(), f.db, f.log, id, 137)
					if err != nil {
						errs <- err
						return
					}
					if !more {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(s *Subscription, wantDeliveries int, wantCursor uint64) {
		t.Helper()
		var n, distinct int
		if err := f.db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id) FROM event_deliveries WHERE subscription_id = ?`, s.ID).Scan(&n, &distinct); err != nil {
			t.Fatal(err)
		}
		got, err := subscriptionGet(context.Background(), f.db, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n != wantDeliveries || distinct != n || got.CursorSequence != wantCursor || got.PendingCount != wantDeliveries {
			t.Fatalf("%s: %d deliveries (%d distinct), cursor %d, pending %d; want %d deliveries, cursor %d",
				s.Name, n, distinct, got.CursorSequence, got.PendingCount, wantDeliveries, wantCursor)
		}
	}
	// Every event matches "bounded": it takes sequences 1..1000 and stops.
	check(bounded, 1000, 1000)
	// task.failed is ResultTypes[1]: sequences 1, 5, 9, ... 4997 (1250 of
	// them); the backlog of 1000 fills at sequence 3997, and the scan stops
	// before the next match, 4001.
	check(failed, 1000, 4000)
}

func TestS4a_FromSequenceSetsTheCursor(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 12)
	head := f.create(t, "head", nil, nil, 0+100)
	if head.CursorSequence != 12 {
		t.Fatalf("omitted from_sequence: cursor %d, want the head 12", head.CursorSequence)
	}
	five := uint64(5)
	if s := f.create(t, "five", nil, &five, 100); s.CursorSequence != 5 {
		t.Fatalf("from_sequence 5: cursor %d", s.CursorSequence)
	}
	if s := f.create(t, "zero", nil, zero(), 100); s.CursorSequence != 0 {
		t.Fatalf("from_sequence 0: cursor %d", s.CursorSequence)
	}
	after := uint64(13)
	err := db.Tx(context.Background(), f.db, func(tx *sql.Tx) error {
		_, err := subscriptionCreate(context.Background(), tx, f.log, &subscriptionCreateParams{
			NamespaceID: f.scope.NamespaceID, QueueID: f.scope.QueueID, CredentialID: f.grant.CredentialID, Name: "late",
			Types: tasks.ResultTypes, FromSequence: &after, MaxPending: 100, MaxAttempts: 3,
		})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "INVALID_ARGUMENT") {
		t.Fatalf("from_sequence after the head: %v, want INVALID_ARGUMENT", err)
	}
}

func TestE8_ClaimRecoverAckStateMachine(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, 3)
	s := f.create(t, "sm", nil, zero(), 100)
	// A budget of one attempt, so the first expiry exhausts it.
	if _, err := f.db.Exec(`UPDATE subscriptions SET max_attempts = 1 WHERE id = ?`, s.ID); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, _, err := deliveryMaterialize(ctx, f.db, f.log, s.ID, 100); err != nil || n != 3 {
		t.Fatalf("materialize: %d %v", n, err)
	}
	session, err := EventSessionOpen(ctx, f.db, nil, &EventSessionOpenParams{SubscriptionID: s.ID, CredentialID: f.grant.CredentialID, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10})
	if err != nil || len(leases) != 2 {
		t.Fatalf("claim: %d leases, %v; want capacity 2", len(leases), err)
	}
	first := leases[0]
	if first.Delivery.LeaseEpoch != 1 || first.Delivery.Attempts != 1 || first.Delivery.State != stateLeased || first.Event.ID != first.Delivery.EventID {
		t.Fatalf("lease: %+v", first.Delivery)
	}
	if more, err := DeliveryClaim(ctx, f.db, f.log, f.grants, &DeliveryClaimParams{Grant: f.grant, SessionID: session, LeaseDuration: time.Minute, RecoverBatch: 10}); err != nil || len(more) != 0 {
		t.Fatalf("a full session claimed %d more (%v)", len(more), err)
	}
	ack := &DeliveryAckParams{Grant: f.grant, SubscriptionID: s.ID, DeliveryID: first.Delivery.ID, Epoch: 1, Secret: first.Secret, SessionID: session}
	res, err := deliveryAck(ctx, f.db, f.grants, ack)
	if err != nil || res.Deduplicated {
		t.Fatalf("ack: %+v %v", res, err)
	}
	again, err := deliveryAck(ctx, f.db, f.grants, ack)
	if err != nil || !again.Deduplicated || again.AcknowledgedAt != res.AcknowledgedAt {
		t.Fatalf("repeat ack: %+v %v; want the original acknowledged_at, deduplicated", again, err)
	}
	wrong := *ack
	wrong.Secret = strings.Repeat("A", 43)
	if _, err := deliveryAck(ctx, f.db, f.grants, &wrong); err != ErrLeaseLost {
		t.Fatalf("wrong secret: %v, want DELIVERY_LEASE_LOST", err)
	}
	var acks int
	f.db.QueryRow(`SELECT COUNT(*) FROM delivery_acks WHERE delivery_id = ?`, first.Delivery.ID).Scan(&acks)
	if acks != 1 {
		t.Fatalf("%d ack records, want 1", acks)
	}
	// The second lease runs out with its budget used: recovery expires it.
	second := leases[1]
	if _, err := f.db.Exec(`UPDATE event_deliveries SET lease_until = ? WHERE id = ?`, db.Now().Add(-time.Second), second.Delivery.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := DeliveryRecover(ctx, f.db, "", 10); err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	d, err := deliveryGet(ctx, f.db, s.ID, second.Delivery.ID)
	if err != nil || d.State != stateExpired || d.Revision != second.Delivery.Revision+1 {
		t.Fatalf("after recovery: %+v %v; want EXPIRED with a new revision", d, err)
	}
	// The latest proof may still ACK while no new epoch replaced it (E-11).
	if res, err := deliveryAck(ctx, f.db, f.grants, &DeliveryAckParams{Grant: f.grant, SubscriptionID: s.ID, DeliveryID: d.ID, Epoch: 1, Secret: second.Secret, SessionID: session}); err != nil || res.Deduplicated {
		t.Fatalf("late ack of an expired lease: %+v %v", res, err)
	}
	got, _ := subscriptionGet(ctx, f.db, s.ID)
	if got.PendingCount != 1 {
		t.Fatalf("pending_count %d, want 1 (two of three acknowledged)", got.PendingCount)
	}
}

// TestS23_FullBacklogsAreNotVisited: the background materialiser looks
// only at subscriptions that are behind and have room; one whose backlog
// is full is left alone (not locked on every append) until room frees.
func TestS23_FullBacklogsAreNotVisited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t)
	f.appendEvents(t, 10)
	full := f.create(t, "full", nil, zero(), 3)
	roomy := f.create(t, "roomy", nil, zero(), 100)
	if _, err := deliveryMaterializeAll(ctx, f.db, f.log, 100, nil, func(id string, err error) { t.Error(id, err) }); err != nil {
		t.Fatal(err)
	}
	f.appendEvents(t, 2)
	ids, err := behindWithRoom(ctx, f.db, f.log)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != roomy.ID {
		t.Fatalf("behind %v, want only %s (roomy); %s is full", ids, roomy.ID, full.ID)
	}
	// One of the full backlog's deliveries leaves it: it has room again.
	if _, err := f.db.ExecContext(ctx, `UPDATE event_deliveries SET state = 'ACKED', revision = revision + 1
		WHERE subscription_id = ? AND sequence = 1`, full.ID); err != nil {
		t.Fatal(err)
	}
	if ids, err = behindWithRoom(ctx, f.db, f.log); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("behind %v, want both subscriptions once the full one has room", ids)
	}
}

// TestS23_RoomFreedByAcksIsFilledForTheNamedSubscriptions: a run woken by
// ACKs materialises the subscriptions they freed room in, up to their
// max_pending, and no other.
func TestS23_RoomFreedByAcksIsFilledForTheNamedSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t)
	f.appendEvents(t, 10)
	named := f.create(t, "named", nil, zero(), 3)
	other := f.create(t, "other", nil, zero(), 3)
	if _, err := deliveryMaterializeAll(ctx, f.db, f.log, 100, nil, func(id string, err error) { t.Error(id, err) }); err != nil {
		t.Fatal(err)
	}
	// Two deliveries of each leave their backlogs.
	if _, err := f.db.ExecContext(ctx, `UPDATE event_deliveries SET state = 'ACKED', revision = revision + 1
		WHERE sequence <= 2`); err != nil {
		t.Fatal(err)
	}
	var room freedRoom
	n, err := deliveryMaterializeFreed(ctx, f.db, f.log, []string{named.ID}, 100, &room, func(id string, err error) { t.Error(id, err) })
	if err != nil || n != 2 {
		t.Fatalf("materialised %d (%v), want 2: the room the ACKs freed", n, err)
	}
	for _, c := range []struct {
		s      *Subscription
		live   int
		cursor uint64
	}{{named, 3, 5}, {other, 1, 3}} {
		got, err := subscriptionGet(ctx, f.db, c.s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.PendingCount != c.live || got.CursorSequence != c.cursor {
			t.Errorf("%s: pending_count %d, cursor %d; want %d and %d", c.s.Name, got.PendingCount, got.CursorSequence, c.live, c.cursor)
		}
	}
	// Caught up or not behind: nothing more to do for it.
	if n, err := deliveryMaterializeFreed(ctx, f.db, f.log, []string{named.ID}, 100, &room, func(id string, err error) { t.Error(id, err) }); err != nil || n != 0 {
		t.Fatalf("second run materialised %d (%v), want 0: the backlog is full again", n, err)
	}
	// The runs taught room the backlog's bound: with max_pending 3, one
	// freed delivery is worth a refill.
	if !room.add([]string{named.ID}) {
		t.Fatal("one delivery freed in a backlog of 3 is not worth a refill")
	}
}

// TestS23_RefillsWaitForAnEighthOfTheBacklog: ACKs make a subscription
// worth a refill once they freed an eighth of its max_pending, as the
// materialiser last read it, or one delivery while it has not read it; a
// look at every subscription forgets what was freed.
func TestS23_RefillsWaitForAnEighthOfTheBacklog(t *testing.T) {
	t.Parallel()
	var room freedRoom
	room.learn("big", 100)
	for i := range 11 {
		if room.add([]string{"big"}) {
			t.Fatalf("%d deliveries freed of max_pending 100 are worth a refill", i+1)
		}
	}
	if ids := room.take(false); len(ids) != 0 {
		t.Fatalf("took %v before an eighth was freed", ids)
	}
	if !room.add([]string{"unknown", "big"}) {
		t.Fatal("twelve freed of 100, or one of an unknown bound, is not worth a refill")
	}
	if ids := room.take(false); !slices.Equal(ids, []string{"big", "unknown"}) {
		t.Fatalf("took %v, want [big unknown]", ids)
	}
	if ids := room.take(false); len(ids) != 0 {
		t.Fatalf("took %v again", ids)
	}
	room.add(slices.Repeat([]string{"big"}, 12))
	if ids := room.take(true); ids != nil {
		t.Fatalf("a look at every subscription took %v", ids)
	}
	if ids := room.take(false); len(ids) != 0 {
		t.Fatalf("took %v after a look at every subscription", ids)
	}
}

// TestS24_AppendedEventsAreMaterialisedInTheirPass: the sequencing pass that
// logs events materialises them in its own transaction for every
// subscription whose cursor stood right before them, by the rules of S-23
// and S-24 (a full backlog takes what fits, a type filter skips and still
// advances the cursor), so a write's deliveries exist when it returns. A
// paused subscription and one behind its queue are left to the
// materialiser, and the pass says when it left one behind.
func TestS24_AppendedEventsAreMaterialisedInTheirPass(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	var leftBehind atomic.Bool
	f.log.OnSequenced(func(ctx context.Context, tx *sql.Tx, appended []tasks.Appended) error {
		_, left, err := materializeAppended(ctx, tx, appended)
		leftBehind.Store(left)
		return err
	})
	every := f.create(t, "every", nil, zero(), 100)
	failedOnly := f.create(t, "failed-only", []string{tasks.EventFailed}, zero(), 100)
	small := f.create(t, "small", nil, zero(), 2)
	paused := f.create(t, "paused", nil, zero(), 100)
	if _, err := f.db.Exec(`UPDATE subscriptions SET enabled = 0 WHERE id = ?`, paused.ID); err != nil {
		t.Fatal(err)
	}
	cancel := func(n int) {
		t.Helper()
		err := db.Tx(ctx, f.db, func(tx *sql.Tx) error {
			for range n {
				task, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: f.scope.NamespaceID, QueueID: f.scope.QueueID, CredentialID: f.grant.CredentialID,
					Input: []byte(`{}`), MaxAttempts: 1,
				})
				if err != nil {
					return err
				}
				if _, _, err := tasks.TaskCancel(ctx, tx, task.ID, ""); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := func(s *Subscription, deliveries int, cursor uint64) {
		t.Helper()
		var n int
		var got uint64
		if err := f.db.QueryRow(`SELECT (SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = s.id), cursor_sequence
			FROM subscriptions s WHERE id = ?`, s.ID).Scan(&n, &got); err != nil {
			t.Fatal(err)
		}
		if n != deliveries || got != cursor {
			t.Errorf("%s: %d deliveries, cursor %d; want %d, %d", s.Name, n, got, deliveries, cursor)
		}
	}
	cancel(3)
	want(every, 3, 3)
	want(failedOnly, 0, 3)
	want(small, 2, 2)
	want(paused, 0, 0)
	if leftBehind.Load() {
		t.Error("the pass says it left a subscription behind; every enabled one was at the cursor")
	}

	behind := f.create(t, "behind", nil, zero(), 100)
	cancel(1)
	want(every, 4, 4)
	want(failedOnly, 0, 4)
	want(small, 2, 2)
	want(behind, 0, 0)
	if !leftBehind.Load() {
		t.Error("the pass does not say it left subscriptions behind (behind, and small after its backlog filled)")
	}
	// The materialiser takes over where the pass left off.
	for _, s := range []*Subscription{behind, paused} {
		if _, err := f.db.Exec(`UPDATE subscriptions SET enabled = 1 WHERE id = ?`, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := deliveryMaterialize(ctx, f.db, f.log, s.ID, 100); err != nil {
			t.Fatal(err)
		}
		want(s, 4, 4)
	}
}
