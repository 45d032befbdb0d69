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
	completionsPerConnection = MaxCapacity
)

// completeRequest is one task.complete waiting for its batch; done runs
// once with its outcome, on the batch's goroutine, and must not block.
type completeRequest struct {
	params tasks.CompleteParams
	done   func(tasks.CompleteOutcome)
}

// newCompleteBatcher returns the node's completion batcher.
func (m *Module) newCompleteBatcher() *batch.Batcher[*completeRequest] {
	return batch.New(completeFlushers, maxCompleteBatch, m.applyCompletions)
}

// applyCompletions runs one batch's transaction, wakes whoever waits for
// what it changed, and answers every request in it.
func (m *Module) applyCompletions(requests []*completeRequest) {
	params := make([]*tasks.CompleteParams, len(requests))
	for i, r := range requests {
		params[i] = &r.params
	}
	// A completion is applied even when its connection ends meanwhile: the
	// proof was valid, and the worker's repeat is deduplicated.
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	outcomes, err := m.tasks.Store().CompleteBatch(ctx, params)
	cancel()
	if err != nil {
		for _, r := range requests {
			r.done(tasks.CompleteOutcome{Err: err})
		}
		return
	}
	appended, requeued := false, false
	for _, o := range outcomes {
		if o.Event != nil {
			appended = true
			requeued = requeued || o.Event.Type == tasks.EventRequeued
		}
	}
	if appended {
		m.tasks.Appended.Notify()
	}
	if requeued {
		m.tasks.Submitted.Notify()
	}
	for i, r := range requests {
		r.done(outcomes[i])
	}
}
