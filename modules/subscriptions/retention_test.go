package subscriptions

import (
	"context"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
)

// TestT11_RetentionHoldKeepsEventsWithLiveDeliveries: the module's
// RetentionHold, which the tasks module asks before it purges, keeps every
// event with a PENDING, LEASED or EXPIRED delivery, and the purge stops at
// the first one; once nothing holds them, old events go.
func TestT11_RetentionHoldKeepsEventsWithLiveDeliveries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	s := f.backlog(t, "all", 6)
	if _, err := f.db.Exec(`UPDATE result_events SET occurred_at = ? WHERE queue_id = ?`, db.Now().Add(-30*24*time.Hour), f.scope.QueueID); err != nil {
		t.Fatal(err)
	}
	setState := func(state string, sequences ...uint64) {
		t.Helper()
		for _, seq := range sequences {
			if _, err := f.db.Exec(`UPDATE event_deliveries SET state = ? WHERE subscription_id = ? AND sequence = ?`, state, s.ID, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	setState(StateAcked, 1, 2, 5)
	setState(stateLeased, 3)
	setState(stateExpired, 6) // 4 stays PENDING
	hold := &Module{}
	purge := func(want int, wantMark uint64, holds ...tasks.RetentionHold) {
		t.Helper()
		n, err := tasks.EventPurge(ctx, f.db, &tasks.EventPurgeParams{QueueID: f.scope.QueueID, Cutoff: db.Now().Add(-24 * time.Hour), Batch: 100, Holds: holds})
		if err != nil || n != want {
			t.Fatalf("purged %d events (%v), want %d", n, err, want)
		}
		st, err := tasks.StreamGet(ctx, f.db, f.scope.QueueID)
		if err != nil || st.RetentionMark != wantMark {
			t.Fatalf("retention mark %d (%v), want %d", st.RetentionMark, err, wantMark)
		}
	}
	purge(2, 3, hold) // stops at the LEASED delivery of 3
	purge(0, 3, hold)
	setState(StateAcked, 3)
	purge(1, 4, hold) // stops at the PENDING delivery of 4
	setState(StateAcked, 4)
	purge(2, 6, hold) // 4 and 5; the EXPIRED delivery of 6 holds it
	if held, err := retentionHeld(ctx, f.db, f.scope.QueueID, 1, 6); err != nil || held != 6 {
		t.Fatalf("RetentionHeld over acknowledged deliveries = %d, %v; want the end of the range, 6", held, err)
	}
	purge(1, 7) // without the hold, 6 goes too
}
