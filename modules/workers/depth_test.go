package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// arrays returns n nested arrays around 0.
func arrays(n int) string {
	return strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
}

// TestC8_InputAtDepthLimitIsReadableAndAssigned: an input at the deepest
// nesting POST /v1/tasks accepts (the body is level 1) is read back
// through GET and reaches a real worker in task.assign, three levels
// deeper; the worker's result at the deepest nesting a frame allows (the
// envelope and the body are levels 1 and 2) is stored and read back.
func TestC8_InputAtDepthLimitIsReadableAndAssigned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	input := arrays(httpx.MaxJSONDepth - 1)
	id := e.submit(t, e.cred, submitParams{Input: input})
	if got := e.task(t, e.cred, id); string(got.Input) != input {
		t.Fatalf("input read back %.80s…, want the submitted one", got.Input)
	}

	w := e.connect(t, e.cred, 1)
	a := w.assign(t)
	if a.Task.ID != id || string(a.Task.Input) != input {
		t.Fatalf("task.assign of %s with input %.80s…, want task %s with the submitted input", a.Task.ID, a.Task.Input, id)
	}
	result := arrays(httpx.MaxJSONDepth - 2)
	ack := wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded, Result: json.RawMessage(result)}))
	if ack.State != tasks.StateSucceeded {
		t.Fatalf("completion ack %+v, want SUCCEEDED", ack)
	}
	if got := e.task(t, e.cred, id); string(got.Result) != result {
		t.Fatalf("result read back %.80s…, want the reported one", got.Result)
	}
}

// TestT4_LeaseWhoseFrameCannotBeSentIsReleased: a task whose task.assign
// cannot be encoded (here an input of 10 001 levels stored before the
// depth limit existed, past what the json packages encode) is released at
// once and logged: it goes back to PENDING without counting the attempt or
// an uncertain effect, and the session's capacity is free for other tasks.
func TestT4_LeaseWhoseFrameCannotBeSentIsReleased(t *testing.T) {
	t.Parallel()
	e := setup(t)
	poison := e.submit(t, e.cred, submitParams{})
	const levels = 10001
	deep := `{"secret_member":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`
	if _, err := e.srv.DB.ExecContext(context.Background(), `UPDATE tasks SET input = ? WHERE id = ?`, deep, poison); err != nil {
		t.Fatal(err)
	}
	other := e.submit(t, e.cred, submitParams{})

	w := e.connect(t, e.cred, 2)
	if a := w.assign(t); a.Task.ID != other {
		t.Fatalf("task.assign of %s, want %s", a.Task.ID, other)
	}
	eventually(t, "the unsent lease released", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM task_attempts WHERE task_id = ? AND state = 'RELEASED'`, poison) > 0
	})
	// The released lease no longer holds capacity: a third task is
	// assigned beside the other one.
	third := e.submit(t, e.cred, submitParams{})
	if a := w.assign(t); a.Task.ID != third {
		t.Fatalf("task.assign of %s, want %s", a.Task.ID, third)
	}
	eventually(t, "task "+poison+" PENDING, no attempt counted", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM tasks WHERE id = ? AND state = 'PENDING' AND attempts = 0 AND effect_uncertain = 0`, poison) == 1
	})
	if n := e.count(t, `SELECT COUNT(*) FROM task_attempts WHERE task_id = ? AND state <> 'RELEASED'`, poison); n != 0 {
		t.Errorf("%d attempts of the unsent task are not RELEASED", n)
	}
	evs := eventSummary(e.events(t, poison))
	for _, ev := range evs {
		if ev != "task.requeued/PENDING/ASSIGN_NOT_SENT" {
			t.Errorf("events %v, want only task.requeued/PENDING/ASSIGN_NOT_SENT", evs)
			break
		}
	}
	logs := e.srv.Logs()
	if !strings.Contains(logs, "task.assign not sent") || !strings.Contains(logs, poison) {
		t.Errorf("the unsent task.assign of %s is not logged", poison)
	}
	if strings.Contains(logs, "secret_member") {
		t.Error("the log names a member of the task's input")
	}
	wantPingAck(t, w.ping(t))
}

// TestC18_FrameNestedPastDepthLimitCloses1008: the depth limit is a rule
// of the frame's JSON, like duplicate names: a frame nested exactly
// MaxJSONDepth levels is a valid envelope, and what its body breaks is
// answered with an error and the connection stays; one level more is an
// invalid envelope and closes the connection with 1008, without an error
// frame, whether the body is a ping's or a completion's result.
func TestC18_FrameNestedPastDepthLimitCloses1008(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("AtTheLimit", func(t *testing.T) {
		t.Parallel()
		w := e.connect(t, e.cred, 1)
		// The envelope and the body are levels 1 and 2.
		f := pingWith(w.Client, arrays(httpx.MaxJSONDepth-2))
		wantError(t, w.Reply(w.SendInvalid(f)), "INVALID_ARGUMENT")
		wantPingAck(t, w.ping(t))
	})
	t.Run("PingPastTheLimit", func(t *testing.T) {
		t.Parallel()
		w := e.connect(t, e.credential(t, "q-ping"), 1)
		w.SendInvalid(pingWith(w.Client, arrays(httpx.MaxJSONDepth-1)))
		wantDepthClose(t, w.Client)
	})
	t.Run("ResultPastTheLimit", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "q-result")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{})
		a := w.assign(t)
		w.SendFrame(w.NewFrame(typeComplete, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded,
			Result: json.RawMessage(arrays(httpx.MaxJSONDepth - 1))}))
		wantDepthClose(t, w.Client)
		if got := e.task(t, cred, id); got.State != tasks.StateRunning {
			t.Errorf("task %s after the refused completion, want RUNNING", got.State)
		}
	})
}

// pingWith returns a worker.ping whose body has the unknown member x with
// the JSON text value.
func pingWith(c *wstest.Client, value string) *wstest.Frame {
	f := c.NewFrame(typePing, struct{}{})
	f.Body = json.RawMessage(`{"x":` + value + `}`)
	return f
}

// wantDepthClose checks that the server closed c with 1008 for a frame
// nested too deep, without any frame before the close.
func wantDepthClose(t *testing.T, c *wstest.Client) {
	t.Helper()
	if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
		t.Errorf("frames before the close: %v", rest)
	}
	_, err := c.Closed()
	ce, ok := err.(*websocket.CloseError)
	want := fmt.Sprintf("invalid envelope: message nests objects and arrays deeper than %d levels", httpx.MaxJSONDepth)
	if !ok || !strings.HasPrefix(ce.Text, want) {
		t.Errorf("close %v, want a reason starting %q", err, want)
	}
}
