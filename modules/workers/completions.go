package workers

import (
	"context"
	"time"

	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Completions of every worker connection on a node are applied in shared
// transactions (group commit): while one batch commits, those arriving
// meanwhile queue up and go together in the next, sharing one commit and
// one hold of each queue's log head. A completion is answered only after
// the commit that applied it.
const (
	// completeFlushers bounds the completion transactions running at once
	// on a node: two, so that one batch gathers while the other commits.
	completeFlushers = 2
	// maxCompleteBatch bounds the completions of one transaction.
	maxCompleteBatch = 128
	// completeTimeout bounds one batch's transaction.
	completeTimeout = 8 * time.Second
	// completionsPerConnection bounds the completions one connection has
	// waiting for their commit; its request loop waits at the bound.
	completionsPerConnection = maxCapacity
)

// completeRequest is one task.complete waiting for its batch.
type completeRequest = batch.Request[tasks.AttemptCompleteParams, tasks.CompleteOutcome]

// newCompleteBatcher returns the node's completion batcher.
func (m *Module) newCompleteBatcher() *batch.Batcher[*completeRequest] {
	return batch.New(completeFlushers, maxCompleteBatch, func(requests []*completeRequest) {
		batch.Record(requests, completeTimeout, m.applyCompletions)
	})
}

// applyCompletions runs one batch's transaction. The tasks store wakes
// whoever waits for what it changed after its commit, before the
// completions are answered.
func (m *Module) applyCompletions(ctx context.Context, params []*tasks.AttemptCompleteParams) ([]tasks.CompleteOutcome, error) {
	return m.tasks.AttemptCompleteBatch(ctx, params)
}
