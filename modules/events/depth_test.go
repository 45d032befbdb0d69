package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// arrays returns n nested arrays around 0.
func arrays(n int) string {
	return strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
}

// succeedWith drives a new task of cred's queue to SUCCEEDED with result
// through the tasks store, as a worker would, and returns the task id.
func (e *env) succeedWith(t *testing.T, cred servertest.Credential, result string) string {
	t.Helper()
	ctx := context.Background()
	m := e.srv.Instances["tasks"].(*tasks.Module)
	store := m.Store()
	r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: newKey(),
		Body: fmt.Sprintf(`{"queue_id":%q,"input":{}}`, cred.QueueID)})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	grant := e.srv.WorkerGrant(t, cred)
	session, err := store.WorkerSessionOpen(ctx, &tasks.WorkerSessionOpenParams{QueueID: cred.QueueID, CredentialID: grant.CredentialID, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	assigned, _, err := store.AttemptLease(ctx, session, grant, time.Minute)
	if err != nil || len(assigned) != 1 {
		t.Fatalf("lease: %v, %d assignments", err, len(assigned))
	}
	a := assigned[0]
	if _, _, err := store.AttemptComplete(ctx, &tasks.AttemptCompleteParams{
		Grant:   grant,
		Proof:   tasks.Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: tasks.OutcomeSucceeded, Result: []byte(result),
	}); err != nil {
		t.Fatal(err)
	}
	return a.Task.ID
}

// TestC8_ResultAtDepthLimitIsDelivered: a result at the deepest nesting
// the API accepts (a review's result, whose body is level 1) reaches a
// consumer inside event.deliver, four levels deeper.
func TestC8_ResultAtDepthLimitIsDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	result := arrays(httpx.MaxJSONDepth - 1)
	id := e.succeedWith(t, e.cred, result)
	c := e.connect(t, e.cred, sub, 1)
	d := c.deliver(t)
	var snapshot struct {
		TaskID string          `json:"task_id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(d.Event.Snapshot, &snapshot); err != nil {
		t.Fatal(err)
	}
	if snapshot.TaskID != id || string(snapshot.Result) != result {
		t.Fatalf("delivered task %s with result %.80s…, want task %s with the reported result", snapshot.TaskID, snapshot.Result, id)
	}
	wantAckReply(t, c.ack(t, d.proof()))
}

// TestE7_DeliveryWhoseFrameCannotBeSentIsGivenBack: a delivery whose
// event.deliver cannot be encoded (here an event snapshot of 10 001
// levels, stored before the depth limit existed) is given back at once
// and logged: PENDING with its attempt not counted, and the connection's
// capacity free for other deliveries.
func TestE7_DeliveryWhoseFrameCannotBeSentIsGivenBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{MaxAttempts: 1})
	poison := e.result(t, e.cred)
	const levels = 10001
	deep := `{"secret_member":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`
	if _, err := e.srv.DB.ExecContext(context.Background(), `UPDATE result_events SET snapshot = ? WHERE task_id = ?`, deep, poison); err != nil {
		t.Fatal(err)
	}
	other := e.result(t, e.cred)

	c := e.connect(t, e.cred, sub, 2)
	if d := c.deliver(t); d.Event.AggregateID != other {
		t.Fatalf("event.deliver for task %s, want %s", d.Event.AggregateID, other)
	}
	var deliveryID string
	if err := e.srv.DB.QueryRowContext(context.Background(), `SELECT d.id FROM event_deliveries d
		JOIN result_events r ON r.id = d.event_id WHERE r.task_id = ?`, poison).Scan(&deliveryID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unsent delivery given back", func() bool {
		d := e.deliveryRow(t, deliveryID)
		return d.State == "PENDING" && d.Epoch > 0 && d.Attempts == 0 && !d.Session.Valid
	})
	// The given-back lease no longer holds capacity: a third result is
	// delivered beside the other one.
	third := e.result(t, e.cred)
	if d := c.deliver(t); d.Event.AggregateID != third {
		t.Fatalf("event.deliver for task %s, want %s", d.Event.AggregateID, third)
	}
	if d := e.deliveryRow(t, deliveryID); d.State == "EXPIRED" {
		t.Fatalf("the unsent delivery is EXPIRED after %d attempts of %d", d.Attempts, d.Budget)
	}
	logs := e.srv.Logs()
	if !strings.Contains(logs, "event.deliver not sent") || !strings.Contains(logs, deliveryID) {
		t.Errorf("the unsent event.deliver of %s is not logged", deliveryID)
	}
	if strings.Contains(logs, "secret_member") {
		t.Error("the log names a member of the event")
	}
	wantPingReply(t, c.ping(t))
}

// TestC18_FrameNestedPastDepthLimitCloses1008: as on the worker entry, a
// frame nested exactly MaxJSONDepth levels is a valid envelope whose bad
// body is answered with INVALID_ARGUMENT, the connection staying; one
// level more is an invalid envelope: close 1008 without an error frame.
func TestC18_FrameNestedPastDepthLimitCloses1008(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})

	t.Run("AtTheLimit", func(t *testing.T) {
		t.Parallel()
		c := e.connect(t, e.cred, sub, 1)
		// The envelope and the body are levels 1 and 2.
		f := pingWith(c.Client, arrays(httpx.MaxJSONDepth-2))
		wantError(t, c.Reply(c.SendInvalid(f)), "INVALID_ARGUMENT")
		wantPingReply(t, c.ping(t))
	})
	t.Run("PastTheLimit", func(t *testing.T) {
		t.Parallel()
		c := e.connect(t, e.cred, sub, 1)
		c.SendInvalid(pingWith(c.Client, arrays(httpx.MaxJSONDepth-1)))
		if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
			t.Errorf("frames before the close: %v", rest)
		}
		_, err := c.Closed()
		ce, ok := err.(*websocket.CloseError)
		want := fmt.Sprintf("invalid envelope: message nests objects and arrays deeper than %d levels", httpx.MaxJSONDepth)
		if !ok || !strings.HasPrefix(ce.Text, want) {
			t.Errorf("close %v, want a reason starting %q", err, want)
		}
	})
}

// pingWith returns an events.ping whose body has the unknown member x
// with the JSON text value.
func pingWith(c *wstest.Client, value string) *wstest.Frame {
	f := c.NewFrame(typePing, struct{}{})
	f.Body = json.RawMessage(`{"x":` + value + `}`)
	return f
}
