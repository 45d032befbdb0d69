package tasks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// TestT8_T10_EveryChangeLoggedInTheEventShape drives tasks of one queue through every kind of
// result and requeue and checks the log: one event per change in sequence
// order (T-8, T-9), each in the seed's event shape with an immutable
// snapshot and details that never carry the input (T-10).
func TestT8_T10_EveryChangeLoggedInTheEventShape(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "events")
	q := c.QueueID
	const marker = "input-must-not-leak"
	input := `{"card":"` + marker + `"}`
	const big = "12345678901234567890123"

	cancelled := e.submit(t, c, submitBody(q, input))
	wantStatus(t, e.cancel(t, c, cancelled.ID, `{"reason":"`+marker+`"}`), http.StatusOK)

	succeeded := e.submit(t, c, submitBody(q, input))
	sa := e.lease(t, c, succeeded.ID, time.Minute)
	e.complete(t, sa, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeSucceeded, Result: []byte(`{"receipt":"R-1","amount":` + big + `}`)})

	reviewed := e.needsReview(t, c, submitBody(q, input))
	wantStatus(t, e.review(t, c, reviewed.ID, `{"expected_revision":"3","resolution":"requeue","reason":"retry by hand"}`), http.StatusOK)
	ra := e.lease(t, c, reviewed.ID, time.Minute)
	e.complete(t, ra, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeFailed, ErrorCode: "DECLINED", ErrorMessage: marker})

	retried := e.submit(t, c, `{"queue_id":"`+q+`","input":`+input+`,"idempotent":true,"max_attempts":2}`)
	ta := e.lease(t, c, retried.ID, time.Minute)
	e.complete(t, ta, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeFailed, ErrorCode: "TIMEOUT"})

	snapshot := func(task tasks.TaskView, state, revision, uncertain, extra string) string {
		return fmt.Sprintf(`{"schema_version":1,"task_id":%q,"queue_id":%q,"state":%q,"revision":%q,"effect_uncertain":%s%s}`,
			task.ID, q, state, revision, uncertain, extra)
	}
	attempt := func(a leased) string { return fmt.Sprintf(`,"current_attempt_id":%q`, a.AttemptID) }
	// reviewed was read after its lease expired: it names the first attempt.
	want := []struct {
		typ, details, snapshot string
		task                   tasks.TaskView
	}{
		{tasks.EventCancelled, `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}`,
			snapshot(cancelled, "CANCELLED", "2", "false", ""), cancelled},
		{tasks.EventSucceeded, `{"state":"SUCCEEDED","reason":"COMPLETED"}`,
			snapshot(succeeded, "SUCCEEDED", "3", "false", `,"result":{"receipt":"R-1","amount":`+big+`}`+attempt(sa)), succeeded},
		{tasks.EventNeedsReview, `{"state":"NEEDS_REVIEW","reason":"LEASE_EXPIRED"}`,
			snapshot(reviewed, "NEEDS_REVIEW", "3", "true", fmt.Sprintf(`,"current_attempt_id":%q`, reviewed.CurrentAttemptID)), reviewed},
		{tasks.EventRequeued, `{"state":"PENDING","reason":"REVIEW_REQUEUE"}`,
			snapshot(reviewed, "PENDING", "4", "false", fmt.Sprintf(`,"current_attempt_id":%q`, reviewed.CurrentAttemptID)), reviewed},
		{tasks.EventFailed, `{"state":"FAILED","reason":"ATTEMPT_FAILED","error_code":"DECLINED"}`,
			snapshot(reviewed, "FAILED", "6", "false", attempt(ra)), reviewed},
		{tasks.EventRequeued, `{"state":"PENDING","reason":"ATTEMPT_FAILED","error_code":"TIMEOUT"}`,
			snapshot(retried, "PENDING", "3", "false", attempt(ta)), retried},
	}

	events := e.events(t, q)
	if len(events) != len(want) {
		t.Fatalf("the log holds %d events, want %d: %+v", len(events), len(want), events)
	}
	for i, ev := range events {
		w := want[i]
		t.Run(fmt.Sprintf("Sequence%d", i+1), func(t *testing.T) {
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			m := wantMembers(t, "event", raw, "id", "sequence", "type", "aggregate_kind", "aggregate_id",
				"aggregate_revision", "occurred_at", "details", "snapshot")
			wantJSON(t, "sequence", m["sequence"], fmt.Sprintf(`"%d"`, i+1))
			wantJSON(t, "type", m["type"], `"`+w.typ+`"`)
			wantJSON(t, "aggregate_kind", m["aggregate_kind"], `"task"`)
			wantJSON(t, "aggregate_id", m["aggregate_id"], `"`+w.task.ID+`"`)
			if !idPattern.Match(m["id"]) || !timePattern.Match(m["occurred_at"]) {
				t.Errorf("id %s occurred_at %s: want an id and an RFC 3339 UTC time", m["id"], m["occurred_at"])
			}
			if !decimalPattern.Match(m["aggregate_revision"]) {
				t.Errorf("aggregate_revision = %s, want a decimal string", m["aggregate_revision"])
			}
			wantJSON(t, "details", ev.Details, w.details)
			wantJSON(t, "snapshot", ev.Snapshot, w.snapshot)
			if s := decodeSnapshot(t, ev.Snapshot); s.Revision != ev.AggregateRevision {
				t.Errorf("aggregate_revision %d differs from the snapshot's revision %d", ev.AggregateRevision, s.Revision)
			}
			if bytes.Contains(raw, []byte(marker)) {
				t.Errorf("the event carries the task input or a reason: %s", raw)
			}
			if i == 1 {
				if !bytes.Contains(ev.Snapshot, []byte(`"amount":`+big)) {
					t.Errorf("snapshot result lost the big integer: %s", ev.Snapshot)
				}
				doctest.Check(t, docPath, "tasks-event", raw)
			}
		})
	}
}
