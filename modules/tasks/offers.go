package tasks

import (
	"context"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
)

// What the tasks module offers to the modules that require it. Each of them
// declares the interface it needs (subscriptions.Log, workers.Tasks) and
// gets the module through modules.Require; these methods are the module's
// store, and the store announces its own commits (see Store).

// The result log, read by the subscriptions module. The methods taking a
// Querier run in the caller's transaction when given one.

// StreamGet returns the committed head and retention mark of a queue's log.
func (s *Store) StreamGet(ctx context.Context, q Querier, queueID string) (Stream, error) {
	return StreamGet(ctx, q, queueID)
}

// StreamHeads returns the committed heads of the given queues' logs.
func (s *Store) StreamHeads(ctx context.Context, q Querier, queueIDs []string) (map[string]uint64, error) {
	return streamHeads(ctx, q, queueIDs)
}

// EventScan returns up to limit events of a queue after a sequence, without
// their bodies.
func (s *Store) EventScan(ctx context.Context, q Querier, queueID string, after uint64, limit int) ([]EventRef, error) {
	return eventScan(ctx, q, queueID, after, limit)
}

// EventsBySequence returns the events of a queue at the given sequences.
func (s *Store) EventsBySequence(ctx context.Context, q Querier, queueID string, sequences []uint64) (map[uint64]Event, error) {
	return eventsBySequence(ctx, q, queueID, sequences)
}

// EventGet returns one event by id within a queue, or sql.ErrNoRows.
func (s *Store) EventGet(ctx context.Context, q Querier, queueID, eventID string) (Event, error) {
	return EventGet(ctx, q, queueID, eventID)
}

// StreamGet: see Store.StreamGet.
func (m *Module) StreamGet(ctx context.Context, q Querier, queueID string) (Stream, error) {
	return m.store.StreamGet(ctx, q, queueID)
}

// StreamHeads: see Store.StreamHeads.
func (m *Module) StreamHeads(ctx context.Context, q Querier, queueIDs []string) (map[string]uint64, error) {
	return m.store.StreamHeads(ctx, q, queueIDs)
}

// EventScan: see Store.EventScan.
func (m *Module) EventScan(ctx context.Context, q Querier, queueID string, after uint64, limit int) ([]EventRef, error) {
	return m.store.EventScan(ctx, q, queueID, after, limit)
}

// EventsBySequence: see Store.EventsBySequence.
func (m *Module) EventsBySequence(ctx context.Context, q Querier, queueID string, sequences []uint64) (map[uint64]Event, error) {
	return m.store.EventsBySequence(ctx, q, queueID, sequences)
}

// EventGet: see Store.EventGet.
func (m *Module) EventGet(ctx context.Context, q Querier, queueID, eventID string) (Event, error) {
	return m.store.EventGet(ctx, q, queueID, eventID)
}

// Appended: see Store.Appended.
func (m *Module) Appended() <-chan struct{} { return m.store.Appended() }

// Task leases, used by the workers module.

// WorkerSessionOpen: see Store.WorkerSessionOpen.
func (m *Module) WorkerSessionOpen(ctx context.Context, p *WorkerSessionOpenParams) (string, error) {
	return m.store.WorkerSessionOpen(ctx, p)
}

// WorkerSessionClose: see Store.WorkerSessionClose.
func (m *Module) WorkerSessionClose(ctx context.Context, sessionID string) error {
	return m.store.WorkerSessionClose(ctx, sessionID)
}

// WorkerSessionAdopt: see Store.WorkerSessionAdopt.
func (m *Module) WorkerSessionAdopt(ctx context.Context, sessionID string, proofs []Proof, leaseDuration time.Duration) ([]string, error) {
	return m.store.WorkerSessionAdopt(ctx, sessionID, proofs, leaseDuration)
}

// AttemptLease: see Store.AttemptLease.
func (m *Module) AttemptLease(ctx context.Context, sessionID string, grant auth.Grant, leaseDuration time.Duration) (assigned []Assignment, full bool, err error) {
	return m.store.AttemptLease(ctx, sessionID, grant, leaseDuration)
}

// AttemptCompleteBatch: see Store.AttemptCompleteBatch.
func (m *Module) AttemptCompleteBatch(ctx context.Context, completions []*AttemptCompleteParams) ([]CompleteOutcome, error) {
	return m.store.AttemptCompleteBatch(ctx, completions)
}

// AttemptRelease: see Store.AttemptRelease.
func (m *Module) AttemptRelease(ctx context.Context, p *Proof, reason string) (*Event, error) {
	return m.store.AttemptRelease(ctx, p, reason)
}

// AttemptUnsent: see Store.AttemptUnsent.
func (m *Module) AttemptUnsent(ctx context.Context, a *Assignment, delay time.Duration) (*Event, error) {
	return m.store.AttemptUnsent(ctx, a, delay)
}

// AttemptRenew: see Store.AttemptRenew.
func (m *Module) AttemptRenew(ctx context.Context, sessionID string, leaseDuration time.Duration) (int, error) {
	return m.store.AttemptRenew(ctx, sessionID, leaseDuration)
}

// CancelRequestList: see Store.CancelRequestList.
func (m *Module) CancelRequestList(ctx context.Context, sessionID string) ([]Proof, error) {
	return m.store.CancelRequestList(ctx, sessionID)
}

// Submitted: see Store.Submitted.
func (m *Module) Submitted() <-chan struct{} { return m.store.Submitted() }

// SubmittedTo: see Store.SubmittedTo.
func (m *Module) SubmittedTo(queueID string) <-chan struct{} { return m.store.SubmittedTo(queueID) }

// CancelRequested: see Store.CancelRequested.
func (m *Module) CancelRequested() <-chan struct{} { return m.store.CancelRequested() }

// OnSequenced: see Store.OnSequenced.
func (m *Module) OnSequenced(h SequencedHook) (remove func()) { return m.store.OnSequenced(h) }
