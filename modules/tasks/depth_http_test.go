package tasks_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// arrays returns n nested arrays around 0.
func arrays(n int) string {
	return strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
}

// depthMessage is the message of a body that opens level MaxJSONDepth+1 at
// byte at.
func depthMessage(at int) string {
	return fmt.Sprintf("request body nests objects and arrays deeper than %d levels (at byte %d)", httpx.MaxJSONDepth, at)
}

// TestC8_InputNestedPastDepthLimitIsRefused: the body is level 1, so input
// may nest MaxJSONDepth-1 levels; one more is refused at the door with
// 400, as is the probe's input of 9 999 levels, which used to be stored and
// then could never be read. A review's result obeys the same limit.
func TestC8_InputNestedPastDepthLimitIsRefused(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "depth-refused")
	prefix := len(`{"queue_id":"` + c.QueueID + `","input":`)

	for _, levels := range []int{httpx.MaxJSONDepth, 9999} {
		r := e.post(t, c, "/v1/tasks", newKey(), submitBody(c.QueueID, arrays(levels)))
		wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
		if got, want := r.Error.Message, depthMessage(prefix+httpx.MaxJSONDepth-1); got != want {
			t.Errorf("input of %d levels: message %q, want %q", levels, got, want)
		}
	}
	n := e.taskCount(t, c.QueueID)
	if n != 0 {
		t.Fatalf("%d tasks stored, want none", n)
	}

	task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
	body := fmt.Sprintf(`{"expected_revision":"%d","resolution":"succeeded","reason":"checked","result":%s}`, task.Revision, arrays(httpx.MaxJSONDepth))
	wantError(t, e.review(t, c, task.ID, body), http.StatusBadRequest, "INVALID_ARGUMENT")
	if got := e.task(t, c, task.ID); got.State != tasks.StateNeedsReview {
		t.Fatalf("task %s after the refused review, want NEEDS_REVIEW", got.State)
	}
}

// TestC8_InputAtDepthLimitIsReadable: input and a review's result at the
// deepest accepted nesting are stored and read back through GET, inside
// the response's own levels.
func TestC8_InputAtDepthLimitIsReadable(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "depth-readable")
	deepest := arrays(httpx.MaxJSONDepth - 1)

	task := e.needsReview(t, c, submitBody(c.QueueID, deepest))
	if got := e.task(t, c, task.ID); string(got.Input) != deepest {
		t.Fatalf("input read back %.80s…, want the submitted one", got.Input)
	}
	body := fmt.Sprintf(`{"expected_revision":"%d","resolution":"succeeded","reason":"checked","result":%s}`, task.Revision, deepest)
	wantStatus(t, e.review(t, c, task.ID, body), http.StatusOK)
	got := e.task(t, c, task.ID)
	if got.State != tasks.StateSucceeded || string(got.Result) != deepest {
		t.Fatalf("task %s with result %.80s…, want SUCCEEDED with the review's result", got.State, got.Result)
	}
	evs := e.events(t, c.QueueID)
	if len(evs) == 0 || string(decodeSnapshot(t, evs[len(evs)-1].Snapshot).Result) != deepest {
		t.Fatalf("the last event's snapshot does not hold the review's result")
	}
}
