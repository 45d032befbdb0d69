package workers_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
)

// closeInternalError is the close code after a temporary failure.
const closeInternalError = 1011

// TestE15_LeaseFailureClosesWithInternalError: the first lease that fails
// on the database closes the connection with 1011, as a failed claim does
// on an event connection (seed 001 §7); no error frame is sent, since this
// protocol's error frames answer a request. A new connection, once the
// database answers again, gets the task.
func TestE15_LeaseFailureClosesWithInternalError(t *testing.T) {
	t.Parallel()
	// Only a signal makes the dispatcher lease, so the test knows how many
	// leases fail: at most the connection's first and the signalled one.
	e := setup(t, workersConfig(func(c *workers.Config) { c.PollInterval = time.Hour }))
	w := e.connect(t, e.cred, 1)

	// Without the sessions table, the lease's transaction fails.
	e.srv.RenameTable(t, "worker_sessions", "worker_sessions_away")
	// An empty write through the tasks store announces, after its commit,
	// everything such a write can change: the dispatcher leases once.
	if err := e.srv.Instances["tasks"].(*tasks.Module).Store().Tx(t.Context(), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if rest := w.ExpectClose(closeInternalError); len(rest) != 0 {
		t.Fatalf("frames before the close: %v", rest)
	}
	e.srv.RenameTable(t, "worker_sessions_away", "worker_sessions")

	later := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{})
	if a := later.assign(t); a.Task.ID != id {
		t.Fatalf("assigned task %s, want %s", a.Task.ID, id)
	}
}
