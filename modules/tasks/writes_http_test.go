package tasks_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// wantReplay checks that replay is the original receipt first, with
// deduplicated true and status 200.
func wantReplay(t *testing.T, first, replay *servertest.Response) {
	t.Helper()
	wantStatus(t, replay, http.StatusOK)
	a, b := members(t, first.Data), members(t, replay.Data)
	if string(a["deduplicated"]) != "false" || string(b["deduplicated"]) != "true" {
		t.Errorf("deduplicated: first %s, replay %s; want false, then true", a["deduplicated"], b["deduplicated"])
	}
	delete(a, "deduplicated")
	delete(b, "deduplicated")
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !sameJSON(t, ja, jb) {
		t.Errorf("replay is not the original receipt:\nfirst  %s\nreplay %s", first.Data, replay.Data)
	}
}

// eventTypes lists the types of a queue's events in sequence order.
func (e *env) eventTypes(t *testing.T, queueID string) string {
	t.Helper()
	var types []string
	for _, ev := range e.events(t, queueID) {
		types = append(types, ev.Type)
	}
	return strings.Join(types, ",")
}

func TestT1_WritesAreIdempotent(t *testing.T) {
	t.Parallel()
	e := startServer(t)

	t.Run("Submit", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "idem-submit")
		key := newKey()
		body := `{"queue_id":"` + c.QueueID + `","input":{"a":1,"b":[1,2]},"max_attempts":2}`
		first := e.post(t, c, "/v1/tasks", key, body)
		wantStatus(t, first, http.StatusCreated)
		task := decodeReceipt(t, first).Task

		t.Run("ReplayReturnsTheOriginalReceipt", func(t *testing.T) {
			// Cancel first: the replay still shows the task as it was created.
			wantStatus(t, e.cancel(t, c, task.ID, `{}`), http.StatusOK)
			reordered := "{\n  \"max_attempts\": 2,\n  \"input\": {\"b\": [1, 2], \"a\": 1},\n  \"queue_id\": \"" + c.QueueID + "\"\n}"
			replay := e.post(t, c, "/v1/tasks", key, reordered)
			wantReplay(t, first, replay)
			doctest.Check(t, docPath, "tasks-submit-replay-response", replay.Body)
			if got := decodeReceipt(t, replay).Task; got.State != tasks.StatePending {
				t.Errorf("replayed receipt shows %s, want the PENDING of the first reply", got.State)
			}
		})
		t.Run("DifferentBodyConflicts", func(t *testing.T) {
			r := e.post(t, c, "/v1/tasks", key, `{"queue_id":"`+c.QueueID+`","input":{"a":1,"b":[1,2]},"max_attempts":3}`)
			wantError(t, r, http.StatusConflict, "IDEMPOTENCY_CONFLICT")
			doctest.Check(t, docPath, "tasks-idempotency-conflict-response", r.Body)
		})
		t.Run("MissingOrMalformedKey", func(t *testing.T) {
			for _, k := range []string{"", "has space", strings.Repeat("k", 129), "ключ"} {
				wantError(t, e.post(t, c, "/v1/tasks", k, body), http.StatusBadRequest, "INVALID_ARGUMENT")
			}
			r := e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: c.Token, Body: body,
				Header: http.Header{"Idempotency-Key": {"k1", "k2"}}})
			wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
		})
		t.Run("KeyIsScopedToTheCredential", func(t *testing.T) {
			other := e.cred(t, "idem-submit")
			r := e.post(t, other, "/v1/tasks", key, body)
			wantStatus(t, r, http.StatusCreated)
			if decodeReceipt(t, r).Task.ID == task.ID {
				t.Fatal("another credential's key returned this credential's receipt")
			}
		})
		t.Run("OnlyTheKeyedWritesCreatedTasks", func(t *testing.T) {
			// The first submit and the other credential's one.
			if n := len(decodePage(t, e.get(t, c, "/v1/tasks?queue_id="+c.QueueID)).Items); n != 2 {
				t.Fatalf("queue has %d tasks, want 2", n)
			}
		})
	})

	t.Run("ConcurrentSubmitsChangeOnce", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "idem-concurrent")
		key, body := newKey(), submitBody(c.QueueID, `{"n":1}`)
		const n = 8
		replies := make([]*servertest.Response, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i] = e.post(t, c, "/v1/tasks", key, body)
			}()
		}
		wg.Wait()
		created := 0
		for _, r := range replies {
			if r == nil {
				t.Fatal("a request failed in transport")
			}
			if r.Status == http.StatusCreated {
				created++
			} else {
				wantStatus(t, r, http.StatusOK)
			}
			if got, want := decodeReceipt(t, r).Task.ID, decodeReceipt(t, replies[0]).Task.ID; got != want {
				t.Fatalf("concurrent requests with one key returned tasks %s and %s", got, want)
			}
		}
		if created != 1 {
			t.Fatalf("%d replies were 201, want exactly 1", created)
		}
		if got := len(decodePage(t, e.get(t, c, "/v1/tasks?queue_id="+c.QueueID)).Items); got != 1 {
			t.Fatalf("queue has %d tasks, want 1", got)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "idem-cancel")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		key, body := newKey(), `{"reason":"customer asked"}`
		path := "/v1/tasks/" + task.ID + ":cancel"
		first := e.post(t, c, path, key, body)
		wantStatus(t, first, http.StatusOK)
		t.Run("ReplayReturnsTheOriginalReceipt", func(t *testing.T) {
			// Without the key this would be a STATE_CONFLICT: the task is final.
			wantReplay(t, first, e.post(t, c, path, key, body))
			if got := e.eventTypes(t, c.QueueID); got != tasks.EventCancelled {
				t.Fatalf("events %s, want one task.cancelled", got)
			}
		})
		t.Run("DifferentBodyConflicts", func(t *testing.T) {
			wantError(t, e.post(t, c, path, key, `{"reason":"changed my mind"}`), http.StatusConflict, "IDEMPOTENCY_CONFLICT")
		})
		t.Run("KeyIsScopedToTheTask", func(t *testing.T) {
			other := e.submit(t, c, submitBody(c.QueueID, `{}`))
			r := e.post(t, c, "/v1/tasks/"+other.ID+":cancel", key, body)
			wantStatus(t, r, http.StatusOK)
			if rc := decodeReceipt(t, r); rc.Deduplicated || rc.Task.ID != other.ID || rc.Task.State != tasks.StateCancelled {
				t.Fatalf("the same key on another task must cancel that task: %s", r.Body)
			}
		})
		t.Run("ConcurrentRepeatsReplay", func(t *testing.T) {
			// The requests that lose the race find the task already
			// cancelled; their key's receipt, not a STATE_CONFLICT, answers.
			pending := e.submit(t, c, submitBody(c.QueueID, `{}`))
			key, path := newKey(), "/v1/tasks/"+pending.ID+":cancel"
			const n = 8
			replies := make([]*servertest.Response, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { replies[i] = e.post(t, c, path, key, body) })
			}
			wg.Wait()
			firsts := 0
			for _, r := range replies {
				wantStatus(t, r, http.StatusOK)
				rc := decodeReceipt(t, r)
				if !rc.Deduplicated {
					firsts++
				}
				if rc.Task.ID != pending.ID || rc.Task.State != tasks.StateCancelled {
					t.Fatalf("receipt %s, want the cancelled task", r.Body)
				}
			}
			if firsts != 1 {
				t.Fatalf("%d replies were not deduplicated, want exactly 1", firsts)
			}
		})
		t.Run("MissingKey", func(t *testing.T) {
			pending := e.submit(t, c, submitBody(c.QueueID, `{}`))
			wantError(t, e.post(t, c, "/v1/tasks/"+pending.ID+":cancel", "", `{}`), http.StatusBadRequest, "INVALID_ARGUMENT")
			wantState(t, e.task(t, c, pending.ID), tasks.StatePending, 1)
		})
	})

	t.Run("Review", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "idem-review")
		task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
		key, body := newKey(), `{"expected_revision":"3","resolution":"requeue","reason":"the charge never happened"}`
		path := "/v1/tasks/" + task.ID + ":review"
		t.Run("MissingKey", func(t *testing.T) {
			wantError(t, e.post(t, c, path, "", body), http.StatusBadRequest, "INVALID_ARGUMENT")
			wantState(t, e.task(t, c, task.ID), tasks.StateNeedsReview, 3)
		})
		first := e.post(t, c, path, key, body)
		wantStatus(t, first, http.StatusOK)
		t.Run("ReplayReturnsTheOriginalReceipt", func(t *testing.T) {
			// The task is PENDING now, so only the receipt can answer this.
			wantReplay(t, first, e.post(t, c, path, key, body))
			if got := e.eventTypes(t, c.QueueID); got != "task.needs_review,task.requeued" {
				t.Fatalf("events %s, want task.needs_review,task.requeued", got)
			}
			wantState(t, e.task(t, c, task.ID), tasks.StatePending, 4)
		})
		t.Run("DifferentBodyConflicts", func(t *testing.T) {
			changed := strings.Replace(body, "never happened", "was refunded", 1)
			wantError(t, e.post(t, c, path, key, changed), http.StatusConflict, "IDEMPOTENCY_CONFLICT")
		})
	})
}

func TestT2_Cancel(t *testing.T) {
	t.Parallel()
	e := startServer(t)

	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "cancel-pending")
		task := e.submit(t, c, submitBody(c.QueueID, `{"invoice":"INV-7"}`))
		body := `{"reason":"order withdrawn"}`
		r := e.cancel(t, c, task.ID, body)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "tasks-cancel-request", []byte(body))
		doctest.Check(t, docPath, "tasks-cancel-response", r.Body)
		rc := decodeReceipt(t, r)
		wantState(t, rc.Task, tasks.StateCancelled, 2)
		if rc.Task.FinishedAt == "" || rc.Task.CancelRequested {
			t.Errorf("cancelled task: finished_at %q cancel_requested %v, want a time and false", rc.Task.FinishedAt, rc.Task.CancelRequested)
		}
		wantState(t, e.task(t, c, task.ID), tasks.StateCancelled, 2)
		events := e.events(t, c.QueueID)
		if len(events) != 1 || events[0].Type != tasks.EventCancelled || events[0].AggregateID != task.ID || events[0].Sequence != 1 {
			t.Fatalf("events = %+v, want one task.cancelled at sequence 1", events)
		}
		wantJSON(t, "details", events[0].Details, `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}`)
		if snap := decodeSnapshot(t, events[0].Snapshot); snap.State != tasks.StateCancelled || snap.Revision != 2 || snap.TaskID != task.ID {
			t.Errorf("snapshot = %s, want the task CANCELLED at revision 2", events[0].Snapshot)
		}
	})

	t.Run("EmptyBody", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "cancel-empty")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		path := "/v1/tasks/" + task.ID + ":cancel"
		key := newKey()
		// servertest sends an empty Body with no body and no Content-Type.
		first := e.post(t, c, path, key, "")
		wantStatus(t, first, http.StatusOK)
		wantState(t, decodeReceipt(t, first).Task, tasks.StateCancelled, 2)
		t.Run("ReplayWithEmptyObjectIsTheSameRequest", func(t *testing.T) {
			wantReplay(t, first, e.post(t, c, path, key, `{}`))
			wantReplay(t, first, e.post(t, c, path, key, ""))
		})
		t.Run("ReplayWithReasonConflicts", func(t *testing.T) {
			wantError(t, e.post(t, c, path, key, `{"reason":"changed my mind"}`), http.StatusConflict, "IDEMPOTENCY_CONFLICT")
		})
		t.Run("ContentTypeSentMustBeJSON", func(t *testing.T) {
			other := e.submit(t, c, submitBody(c.QueueID, `{}`))
			r := e.srv.Do(t, servertest.Request{
				Method: http.MethodPost, Path: "/v1/tasks/" + other.ID + ":cancel", Token: c.Token, IdempotencyKey: newKey(),
				Header: http.Header{"Content-Type": {"text/plain"}},
			})
			wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
			wantState(t, e.task(t, c, other.ID), tasks.StatePending, 1)
		})
	})

	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "cancel-running")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		a := e.lease(t, c, task.ID, time.Minute)
		r := e.cancel(t, c, task.ID, `{}`)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "tasks-cancel-running-response", r.Body)
		rc := decodeReceipt(t, r)
		wantState(t, rc.Task, tasks.StateRunning, 2)
		if !rc.Task.CancelRequested {
			t.Fatalf("cancel_requested is false after cancelling a RUNNING task")
		}
		if got := e.task(t, c, task.ID); got.State != tasks.StateRunning || !got.CancelRequested {
			t.Fatalf("task is %s with cancel_requested %v, want RUNNING and true", got.State, got.CancelRequested)
		}
		if n := len(e.events(t, c.QueueID)); n != 0 {
			t.Fatalf("a cancel request appended %d events, want none until the worker reports", n)
		}
		t.Run("AgainIsNoConflict", func(t *testing.T) {
			r := e.cancel(t, c, task.ID, `{"reason":"still want it stopped"}`)
			wantStatus(t, r, http.StatusOK)
			wantState(t, decodeReceipt(t, r).Task, tasks.StateRunning, 2)
		})
		t.Run("ProofsOfTheAttemptAreAskedToStop", func(t *testing.T) {
			proofs, err := e.store.CancelRequestList(t.Context(), a.Session)
			if err != nil {
				t.Fatal(err)
			}
			if len(proofs) != 1 || proofs[0].AttemptID != a.AttemptID {
				t.Fatalf("cancel requests %+v, want the attempt %s", proofs, a.AttemptID)
			}
		})
		t.Run("WorkerStops", func(t *testing.T) {
			e.complete(t, a, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeCancelled})
			wantState(t, e.task(t, c, task.ID), tasks.StateCancelled, 3)
			events := e.events(t, c.QueueID)
			if len(events) != 1 || events[0].Type != tasks.EventCancelled {
				t.Fatalf("events = %+v, want one task.cancelled", events)
			}
			wantJSON(t, "details", events[0].Details, `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}`)
		})
	})

	t.Run("RunningWorkerFinishesAnyway", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "cancel-late")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		a := e.lease(t, c, task.ID, time.Minute)
		wantStatus(t, e.cancel(t, c, task.ID, `{}`), http.StatusOK)
		e.complete(t, a, tasks.AttemptCompleteParams{Outcome: tasks.OutcomeSucceeded, Result: []byte(`{"done":true}`)})
		wantState(t, e.task(t, c, task.ID), tasks.StateSucceeded, 3)
		if got := e.eventTypes(t, c.QueueID); got != tasks.EventSucceeded {
			t.Fatalf("events %s, want task.succeeded", got)
		}
	})

	t.Run("FinalConflicts", func(t *testing.T) {
		t.Parallel()
		finals := map[string]func(t *testing.T, c servertest.Credential) tasks.TaskView{
			"Cancelled": func(t *testing.T, c servertest.Credential) tasks.TaskView {
				task := e.submit(t, c, submitBody(c.QueueID, `{}`))
				wantStatus(t, e.cancel(t, c, task.ID, `{}`), http.StatusOK)
				return e.task(t, c, task.ID)
			},
			"Succeeded": func(t *testing.T, c servertest.Credential) tasks.TaskView {
				task := e.submit(t, c, submitBody(c.QueueID, `{}`))
				e.complete(t, e.lease(t, c, task.ID, time.Minute), tasks.AttemptCompleteParams{Outcome: tasks.OutcomeSucceeded, Result: []byte(`1`)})
				return e.task(t, c, task.ID)
			},
			"Failed": func(t *testing.T, c servertest.Credential) tasks.TaskView {
				task := e.submit(t, c, submitBody(c.QueueID, `{}`))
				e.complete(t, e.lease(t, c, task.ID, time.Minute), tasks.AttemptCompleteParams{Outcome: tasks.OutcomeFailed, ErrorCode: "E"})
				return e.task(t, c, task.ID)
			},
			"NeedsReview": func(t *testing.T, c servertest.Credential) tasks.TaskView {
				return e.needsReview(t, c, submitBody(c.QueueID, `{}`))
			},
		}
		for name, final := range finals {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := e.cred(t, "cancel-final-"+name)
				task := final(t, c)
				before := e.eventTypes(t, c.QueueID)
				r := e.cancel(t, c, task.ID, `{}`)
				wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
				if name == "Succeeded" {
					doctest.Check(t, docPath, "tasks-cancel-conflict-response", r.Body)
				}
				if got := e.task(t, c, task.ID); got.State != task.State || got.Revision != task.Revision || got.CancelRequested {
					t.Fatalf("a refused cancel changed the task: %+v", got)
				}
				if after := e.eventTypes(t, c.QueueID); after != before {
					t.Fatalf("a refused cancel appended events: %s, was %s", after, before)
				}
			})
		}
	})

	t.Run("StrictBody", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "cancel-strict")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		for _, body := range []string{`{"reason":1}`, `{"why":"x"}`, `{"reason":"` + strings.Repeat("é", tasks.MaxReasonChars+1) + `"}`} {
			wantError(t, e.cancel(t, c, task.ID, body), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.cancel(t, c, "not-an-id", `{}`), http.StatusBadRequest, "INVALID_ARGUMENT")
		r := e.cancel(t, c, task.ID, `{"reason":"`+strings.Repeat("é", tasks.MaxReasonChars)+`"}`)
		wantState(t, decodeReceipt(t, r).Task, tasks.StateCancelled, 2)
	})
}

// TestT1_SubmitsArrivingTogetherAreEachTheirOwn: submissions that arrive
// together share transactions, and each is still judged on its own key in
// its credential's scope: two credentials send the same keys at once, each
// key twice, and every (credential, key) creates one task, whose receipt
// both of its requests get.
func TestT1_SubmitsArrivingTogetherAreEachTheirOwn(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	creds := []servertest.Credential{e.cred(t, "together-a"), e.cred(t, "together-b")}
	const keys, repeats = 24, 2
	type sent struct {
		cred, key int
		reply     *servertest.Response
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		sends []sent
	)
	for c := range creds {
		for k := range keys {
			for range repeats {
				wg.Go(func() {
					body := submitBody(creds[c].QueueID, `{"k":`+strconv.Itoa(k)+`}`)
					r := e.post(t, creds[c], "/v1/tasks", "together-"+strconv.Itoa(k), body)
					mu.Lock()
					sends = append(sends, sent{c, k, r})
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	created := map[[2]int]int{}
	tasksOf := map[[2]int]string{}
	for _, s := range sends {
		id := [2]int{s.cred, s.key}
		if s.reply.Status == http.StatusCreated {
			created[id]++
		} else {
			wantStatus(t, s.reply, http.StatusOK)
		}
		task := decodeReceipt(t, s.reply).Task
		if prev, ok := tasksOf[id]; ok && prev != task.ID {
			t.Errorf("credential %d, key %d: tasks %s and %s", s.cred, s.key, prev, task.ID)
		}
		tasksOf[id] = task.ID
	}
	for c := range creds {
		for k := range keys {
			if n := created[[2]int{c, k}]; n != 1 {
				t.Errorf("credential %d, key %d: created %d times, want 1", c, k, n)
			}
		}
		count := e.taskCount(t, creds[c].QueueID)
		if count != keys {
			t.Errorf("credential %d: %d tasks in its queue, want %d", c, count, keys)
		}
	}
}

// TestT1_ASubmissionWakesTheWorkersOfItsQueue: a task submitted through a
// node wakes the worker connections of its queue there, not every worker
// connection, and raises the relayed signal, which wakes every worker
// connection of the other nodes (it does not say which queue). A batch
// wakes the queues of the tasks it created.
func TestT1_ASubmissionWakesTheWorkersOfItsQueue(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	mod := e.srv.Instances["tasks"].(*tasks.Module)
	a, b := e.cred(t, "wake-a"), e.cred(t, "wake-b")
	relayed := mod.ClusterSignals()[0].Broadcast
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	for _, c := range []struct {
		name   string
		submit func()
	}{
		{"single", func() {
			wantStatus(t, e.post(t, a, "/v1/tasks", newKey(), submitBody(a.QueueID, `{}`)), http.StatusCreated)
		}},
		{"batch", func() {
			e.batch(t, a, `{"tasks":[{"idempotency_key":"`+newKey()+`","queue_id":"`+a.QueueID+`","input":{}}]}`)
		}},
	} {
		everyone, forA, forB, published := mod.Submitted(), mod.SubmittedTo(a.QueueID), mod.SubmittedTo(b.QueueID), relayed.Gen()
		c.submit()
		if !isClosed(forA) {
			t.Errorf("%s: the workers of the task's queue were not woken", c.name)
		}
		if isClosed(forB) || isClosed(everyone) {
			t.Errorf("%s: woken: another queue's workers %v, every worker %v; want neither", c.name, isClosed(forB), isClosed(everyone))
		}
		if relayed.Gen() == published {
			t.Errorf("%s: the signal relayed to the other nodes was not raised", c.name)
		}
	}
}
