package workers_test

import (
	"testing"

	"github.com/orbitrun/orbit/modules/tasks"
)

// TestCompleteTransactionFailureIsUnavailableAndKeepsTheConnection: when
// the transaction that applies a completion fails, task.complete is
// answered with UNAVAILABLE and the connection stays open. Nothing was
// applied, so the same completion sent again succeeds for the first time
// and the log holds one result event for the task.
func TestCompleteTransactionFailureIsUnavailableAndKeepsTheConnection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{})
	a := w.assign(t)
	body := completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}

	// Without the result log's intake, the completion's event cannot be
	// appended and the batch's transaction fails.
	e.srv.RenameTable(t, "result_intake", "result_intake_away")
	f := w.NewFrame(typeComplete, body)
	answer := w.Reply(w.SendFrame(f))
	wantError(t, answer, "UNAVAILABLE")
	if answer.ReplyTo != f.MessageID || answer.SessionID != w.session {
		t.Fatalf("error envelope: %s", answer)
	}
	wantPingAck(t, w.ping(t))
	if row, _ := e.attempt(t, a.AttemptID); row.State != tasks.AttemptRunning {
		t.Fatalf("attempt %s after the failed completion, want RUNNING", row.State)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM tasks WHERE id = ? AND state = 'RUNNING' AND revision = 2`, id); n != 1 {
		t.Fatalf("the failed completion changed task %s", id)
	}
	e.srv.RenameTable(t, "result_intake_away", "result_intake")

	ack := wantCompleteAck(t, w.complete(t, body))
	want := completeAck{TaskID: id, AttemptID: a.AttemptID, Outcome: tasks.OutcomeSucceeded, State: tasks.StateSucceeded, Revision: "3"}
	if ack != want {
		t.Fatalf("ack of the completion sent again %+v, want %+v", ack, want)
	}
	if evs := eventSummary(e.events(t, id)); len(evs) != 1 || evs[0] != "task.succeeded/SUCCEEDED/COMPLETED" {
		t.Fatalf("events %v, want one task.succeeded", evs)
	}
}
