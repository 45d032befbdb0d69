package integration_test

import (
	"errors"
	"testing"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/internal/testkit/dbtest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// cutCommit applies raw through a proxy that cuts the connection at its
// COMMIT as mode says, and checks that Apply reports the outcome as
// unconfirmed (R-9, R-21: the handler returns an error, so no ACK).
func (f *fixture) cutCommit(mode dbtest.CutMode, raw []byte) {
	f.t.Helper()
	cutter := dbtest.NewCommitCutter(f.t, env.receiverDSN)
	pool, err := openReceiver(cutter.DSN(env.receiverDSN))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { pool.Close() }) // before the proxy stops
	s := f.storeFor(pool, f.consumer, f.queueID)

	cut := cutter.CutNextCommit(mode)
	res, err := s.Apply(f.ctx, raw)
	if !errors.Is(err, inbox.ErrCommitUnconfirmed) {
		f.t.Fatalf("Apply with its COMMIT cut = %+v, %v; want ErrCommitUnconfirmed", res, err)
	}
	select {
	case <-cut:
	case <-f.ctx.Done():
		f.t.Fatal("the proxy never cut a COMMIT")
	}
}

// R-21 (R-17 "COMMIT reply unknown", committed): the proxy forwards
// MySQL's real OK for COMMIT to nowhere; the caller reports the commit
// unconfirmed, another connection sees it committed, and a new Store of the
// same identity deduplicates without updating again.
func TestR21_CommitReplyLostIsUnconfirmed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	taskID, raw := f.cancelled()
	f.cutCommit(dbtest.CutAfterCommit, raw)

	id := eventID(t, raw)
	if row, ok := f.inboxRows(f.consumer, f.queueID)[id]; !ok || !row.Applied {
		t.Fatalf("after the lost reply the inbox row is %+v (present %v), want it committed with applied=1", row, ok)
	}
	committed := f.view(f.consumer, f.queueID, taskID)
	wantView(t, committed, 2, id, tasks.StateCancelled, 1)

	// The redelivery, in a new process: a new Store on a direct connection.
	if res := f.apply(f.storeFor(env.receiver, f.consumer, f.queueID), raw); res != (inbox.Result{Duplicate: true, Applied: true}) {
		t.Fatalf("redelivery after the lost reply = %+v, want duplicate and applied", res)
	}
	after := f.view(f.consumer, f.queueID, taskID)
	wantView(t, after, 2, id, tasks.StateCancelled, 1)
	if !after.UpdatedAt.Equal(committed.UpdatedAt) {
		t.Fatalf("the redelivery touched the view: updated_at %s, was %s", after.UpdatedAt, committed.UpdatedAt)
	}
}

// R-21 (R-17 "COMMIT reply unknown", not committed): the connection breaks
// before COMMIT reaches the server; the outcome is just as unknown to the
// caller, nothing is committed, and the redelivery applies the event.
func TestR21_CommitNeverArrivedIsUnconfirmedAndRetried(t *testing.T) {
	t.Parallel()
	f := setup(t)
	taskID, raw := f.cancelled()
	f.cutCommit(dbtest.CutBeforeCommit, raw)

	if in, views := f.rowCounts(f.consumer); in != 0 || views != 0 {
		t.Fatalf("an uncommitted transaction shows %d inbox and %d view rows", in, views)
	}
	if res := f.apply(f.storeFor(env.receiver, f.consumer, f.queueID), raw); res != (inbox.Result{Applied: true}) {
		t.Fatalf("redelivery after the cut = %+v, want applied afresh", res)
	}
	wantView(t, f.view(f.consumer, f.queueID, taskID), 2, eventID(t, raw), tasks.StateCancelled, 1)
}
