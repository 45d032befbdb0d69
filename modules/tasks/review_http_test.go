package tasks_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// TestReview holds the rules of POST /v1/tasks/{id}:review: only a
// NEEDS_REVIEW task at the expected revision, and each resolution's effect.
func TestReview(t *testing.T) {
	t.Parallel()
	e := startServer(t)

	t.Run("StaleRevision", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-stale")
		task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
		for _, rev := range []string{"2", "4"} {
			r := e.review(t, c, task.ID, `{"expected_revision":"`+rev+`","resolution":"requeue","reason":"checked"}`)
			wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
		}
		wantState(t, e.task(t, c, task.ID), tasks.StateNeedsReview, 3)
		if got := e.eventTypes(t, c.QueueID); got != tasks.EventNeedsReview {
			t.Fatalf("events %s, want only task.needs_review", got)
		}
	})

	t.Run("OnlyNeedsReview", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-state")
		pending := e.submit(t, c, submitBody(c.QueueID, `{}`))
		body := `{"expected_revision":"1","resolution":"succeeded","reason":"checked"}`
		wantError(t, e.review(t, c, pending.ID, body), http.StatusConflict, "STATE_CONFLICT")
		e.lease(t, c, pending.ID, time.Minute)
		running := strings.Replace(body, `"1"`, `"2"`, 1)
		wantError(t, e.review(t, c, pending.ID, running), http.StatusConflict, "STATE_CONFLICT")
		wantState(t, e.task(t, c, pending.ID), tasks.StateRunning, 2)
	})

	t.Run("Requeue", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-requeue")
		task := e.needsReview(t, c, `{"queue_id":"`+c.QueueID+`","input":{},"max_attempts":1}`)
		if !task.EffectUncertain || task.Attempts != 1 {
			t.Fatalf("after an expired lease: effect_uncertain %v attempts %d, want true and 1", task.EffectUncertain, task.Attempts)
		}
		r := e.review(t, c, task.ID, `{"expected_revision":"3","resolution":"requeue","reason":"nothing was charged"}`)
		wantStatus(t, r, http.StatusOK)
		got := decodeReceipt(t, r).Task
		wantState(t, got, tasks.StatePending, 4)
		if got.EffectUncertain || got.MaxAttempts != 2 || got.Attempts != 1 || got.FinishedAt != "" {
			t.Fatalf("requeued task: %+v; want effect_uncertain false, max_attempts 2 (one more), attempts 1, no finished_at", got)
		}
		events := e.events(t, c.QueueID)
		if len(events) != 2 || events[1].Type != tasks.EventRequeued {
			t.Fatalf("events = %+v, want task.needs_review then task.requeued", events)
		}
		wantJSON(t, "details", events[1].Details, `{"state":"PENDING","reason":"REVIEW_REQUEUE"}`)
		if s := decodeSnapshot(t, events[1].Snapshot); s.State != tasks.StatePending || s.Revision != 4 || s.EffectUncertain {
			t.Fatalf("snapshot %s, want PENDING at revision 4 without effect_uncertain", events[1].Snapshot)
		}
		again := e.lease(t, c, task.ID, time.Minute)
		if again.Task.Attempts != 2 {
			t.Fatalf("the requeued task runs as attempt %d, want 2", again.Task.Attempts)
		}
	})

	t.Run("SucceededWithResult", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-succeeded")
		task := e.needsReview(t, c, submitBody(c.QueueID, `{"charge":"CH-9"}`))
		const big = "12345678901234567890123"
		body := `{"expected_revision":"3","resolution":"succeeded","reason":"the charge went through","result":{"charged":` + big + `}}`
		r := e.review(t, c, task.ID, body)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "tasks-review-request", []byte(body))
		doctest.Check(t, docPath, "tasks-review-response", r.Body)
		got := e.task(t, c, task.ID)
		wantState(t, got, tasks.StateSucceeded, 4)
		if string(got.Result) != `{"charged":`+big+`}` || got.FinishedAt == "" || !got.EffectUncertain {
			t.Fatalf("succeeded task: result %s finished_at %q effect_uncertain %v; want the reviewed result exactly, a time, and still true",
				got.Result, got.FinishedAt, got.EffectUncertain)
		}
		events := e.events(t, c.QueueID)
		if len(events) != 2 || events[1].Type != tasks.EventSucceeded {
			t.Fatalf("events = %+v, want task.needs_review then task.succeeded", events)
		}
		wantJSON(t, "details", events[1].Details, `{"state":"SUCCEEDED","reason":"REVIEW_RESOLVED"}`)
		s := decodeSnapshot(t, events[1].Snapshot)
		if s.State != tasks.StateSucceeded || s.Revision != 4 || !bytes.Contains(events[1].Snapshot, []byte(`"result":{"charged":`+big+`}`)) {
			t.Fatalf("snapshot %s, want SUCCEEDED at revision 4 with the result exactly", events[1].Snapshot)
		}
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-failed")
		task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
		r := e.review(t, c, task.ID, `{"expected_revision":"3","resolution":"failed","reason":"refunded by hand"}`)
		wantStatus(t, r, http.StatusOK)
		got := decodeReceipt(t, r).Task
		wantState(t, got, tasks.StateFailed, 4)
		if got.Error == nil || *got.Error != (tasks.TaskError{Code: "REVIEW_FAILED", Message: "refunded by hand"}) {
			t.Fatalf("error = %+v, want REVIEW_FAILED with the reason", got.Error)
		}
		events := e.events(t, c.QueueID)
		if len(events) != 2 || events[1].Type != tasks.EventFailed {
			t.Fatalf("events = %+v, want task.needs_review then task.failed", events)
		}
		wantJSON(t, "details", events[1].Details, `{"state":"FAILED","reason":"REVIEW_RESOLVED","error_code":"REVIEW_FAILED"}`)
	})

	t.Run("InvalidBodies", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "review-invalid")
		task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
		for _, tc := range []struct{ name, body string }{
			{"ResultWithRequeue", `{"expected_revision":"3","resolution":"requeue","reason":"r","result":{}}`},
			{"NullResultWithRequeue", `{"expected_revision":"3","resolution":"requeue","reason":"r","result":null}`},
			{"EmptyReason", `{"expected_revision":"3","resolution":"requeue","reason":""}`},
			{"MissingReason", `{"expected_revision":"3","resolution":"requeue"}`},
			{"LongReason", `{"expected_revision":"3","resolution":"requeue","reason":"` + strings.Repeat("r", tasks.MaxReasonChars+1) + `"}`},
			{"MissingRevision", `{"resolution":"requeue","reason":"r"}`},
			{"RevisionAsNumber", `{"expected_revision":3,"resolution":"requeue","reason":"r"}`},
			{"RevisionLeadingZero", `{"expected_revision":"03","resolution":"requeue","reason":"r"}`},
			{"UnknownResolution", `{"expected_revision":"3","resolution":"retry","reason":"r"}`},
			{"MissingResolution", `{"expected_revision":"3","reason":"r"}`},
			{"UnknownField", `{"expected_revision":"3","resolution":"requeue","reason":"r","note":"x"}`},
			{"ResultTooLarge", `{"expected_revision":"3","resolution":"succeeded","reason":"r","result":"` + strings.Repeat("x", tasks.MaxInputBytes) + `"}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, e.review(t, c, task.ID, tc.body), http.StatusBadRequest, "INVALID_ARGUMENT")
			})
		}
		wantState(t, e.task(t, c, task.ID), tasks.StateNeedsReview, 3)
	})
}
