package workers_test

import (
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
)

// pair returns a worker credential and a producer credential on a queue of
// their own.
func (e *env) pair(t *testing.T, name string) (worker, producer servertest.Credential) {
	t.Helper()
	queue := "grant-" + name
	return e.credential(t, queue), e.credential(t, queue)
}

// TestT3_EveryLeaseChecksTheGrant: the lease after a revocation, a removed
// tasks:work or a removed queue grant leases nothing and closes the
// connection with 1008 at once, not at the next ping (seed 001 §1: every
// operation checks the queue scope). Error frames of this protocol answer
// requests, so the close reason carries the code.
func TestT3_EveryLeaseChecksTheGrant(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tt := range e.srv.GrantChanges(auth.PermTasksWork) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			worker, producer := e.pair(t, "lease-"+tt.Name)
			w := e.connect(t, worker, 1)
			tt.Apply(t, worker.CredentialID)
			id := e.submit(t, producer, submitParams{})
			if rest := w.ExpectClose(closePolicyViolation); len(rest) != 0 {
				t.Fatalf("frames before the close: %v", rest)
			}
			if got := e.task(t, producer, id); got.State != tasks.StatePending || got.Attempts != 0 {
				t.Fatalf("task after the refused lease: %s, %d attempts; want PENDING, 0", got.State, got.Attempts)
			}
		})
	}
}

// TestT3_EveryCompletionChecksTheGrant: a completion after a revocation, a
// removed tasks:work or a removed queue grant applies nothing, is answered
// with the error and the connection closes with 1008.
func TestT3_EveryCompletionChecksTheGrant(t *testing.T) {
	t.Parallel()
	// Leases run only after the welcome, after assignments and when tasks
	// are signalled, so that once settled no lease finds the change before
	// the completion does.
	e := setup(t, workersConfig(func(c *workers.Config) { c.PollInterval = time.Hour }))
	for _, tt := range e.srv.GrantChanges(auth.PermTasksWork) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			worker, producer := e.pair(t, "complete-"+tt.Name)
			w := e.connect(t, worker, 1)
			id := e.submit(t, producer, submitParams{})
			a := w.assign(t)
			w.settle()
			tt.Apply(t, worker.CredentialID)
			wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), tt.Code)
			w.ExpectClose(closePolicyViolation)
			if got := e.task(t, producer, id); got.State != tasks.StateRunning {
				t.Fatalf("task after the refused completion: %s, want RUNNING", got.State)
			}
		})
	}
}
