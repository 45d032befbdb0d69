package workers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// wantPersisted checks that the lease a describes is in the database as it
// was sent: the attempt row of session, RUNNING, and the task pointing at it.
func (e *env) wantPersisted(t *testing.T, a *assignment, session string) {
	t.Helper()
	row, ok := e.attempt(t, a.AttemptID)
	if !ok {
		t.Fatalf("task.assign of attempt %s arrived before its task_attempts row exists", a.AttemptID)
	}
	if row.TaskID != a.Task.ID || row.SessionID != session || row.State != tasks.AttemptRunning {
		t.Fatalf("attempt row task %s session %s state %s, want %s %s RUNNING", row.TaskID, row.SessionID, row.State, a.Task.ID, session)
	}
	if got := jsonUint(row.Epoch); got != a.Epoch {
		t.Fatalf("attempt row epoch %s, frame %s", got, a.Epoch)
	}
	if !bytes.Equal(row.Digest, secretDigest(a.LeaseSecret)) {
		t.Fatal("attempt row does not hold the digest of the lease secret that was sent")
	}
	if !row.LeaseUntil.Equal(parseTime(t, a.LeaseUntil)) {
		t.Fatalf("attempt row lease_until %s, frame %s", row.LeaseUntil, a.LeaseUntil)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM tasks WHERE id = ? AND state = 'RUNNING' AND current_attempt_id = ?`, a.Task.ID, a.AttemptID); n != 1 {
		t.Fatalf("task %s is not RUNNING under attempt %s", a.Task.ID, a.AttemptID)
	}
}

func jsonUint(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestT4_LeasesPersistedBeforeAssignAndCapacity(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const total, capacity = 10, 2
	for range total {
		e.submit(t, e.cred, submitParams{Idempotent: true})
	}
	w := e.connect(t, e.cred, capacity)
	running := func() int {
		return e.count(t, `SELECT COUNT(*) FROM task_attempts WHERE session_id = ? AND state = 'RUNNING'`, w.session)
	}

	held := map[string]*assignment{}
	seen := map[string]bool{}
	take := func() {
		t.Helper()
		a := w.assign(t)
		e.wantPersisted(t, a, w.session)
		if seen[a.Task.ID] {
			t.Fatalf("task %s assigned twice", a.Task.ID)
		}
		seen[a.Task.ID] = true
		held[a.AttemptID] = a
		if len(held) > capacity {
			t.Fatalf("the session holds %d leases, capacity %d", len(held), capacity)
		}
		if a.Task.Attempts != 1 || a.Epoch != "1" || a.Task.Revision != "2" || !a.Task.Idempotent || a.Task.MaxAttempts != 3 {
			t.Fatalf("assignment %s", a.frame)
		}
	}
	take()
	take()
	// The session is full: no third lease although 8 tasks wait.
	w.ExpectNone(quiet)
	if n := running(); n != capacity {
		t.Fatalf("%d RUNNING attempts for the session, want %d", n, capacity)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM tasks WHERE queue_id = ? AND state = 'PENDING'`, e.cred.QueueID); n != total-capacity {
		t.Fatalf("%d PENDING tasks, want %d", n, total-capacity)
	}
	// Each completion frees one slot, and a new lease follows.
	for done := 0; done < total; done++ {
		var a *assignment
		for _, a = range held {
			break
		}
		ack := w.succeed(t, a)
		if ack.State != tasks.StateSucceeded || ack.Deduplicated {
			t.Fatalf("ack %+v", ack)
		}
		delete(held, a.AttemptID)
		if len(seen) < total {
			take()
		}
		if n := running(); n > capacity {
			t.Fatalf("%d RUNNING attempts for the session, capacity %d", n, capacity)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d tasks assigned, want %d", len(seen), total)
	}
	w.ExpectNone(quiet)
}

func TestT4_ManySessionsNeverDoubleAssign(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const sessions, total, capacity = 4, 200, 4

	var (
		mu       sync.Mutex
		assigned = map[string]int{} // task id -> assignments
		finished = make(chan struct{})
		closing  sync.Once
	)
	var wg sync.WaitGroup
	for i := range sessions {
		w := e.connect(t, e.cred, capacity)
		wg.Add(1)
		go func() {
			defer wg.Done()
			outstanding := 0
			for {
				select {
				case <-finished:
					return
				default:
				}
				f, err := w.TryNext(100 * time.Millisecond)
				if errors.Is(err, wstest.ErrTimeout) {
					continue
				}
				if err != nil {
					t.Errorf("session %d: %v", i, err)
					return
				}
				switch f.Type {
				case typeAck:
					continue
				case typeAssign:
				default:
					t.Errorf("session %d: unexpected frame %s", i, f)
					return
				}
				var a assignment
				if err := f.DecodeBody(&a); err != nil {
					t.Errorf("session %d: %v", i, err)
					return
				}
				if outstanding++; outstanding > capacity {
					t.Errorf("session %d holds %d leases, capacity %d", i, outstanding, capacity)
				}
				mu.Lock()
				assigned[a.Task.ID]++
				if len(assigned) == total {
					closing.Do(func() { close(finished) })
				}
				mu.Unlock()
				if _, err := w.TrySend(typeComplete, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}); err != nil {
					t.Errorf("session %d: %v", i, err)
					return
				}
				// The slot is free once the server has the completion: the
				// next task.assign may arrive before the ack.
				outstanding--
			}
		}()
	}
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		e.submitMany(t, e.cred, total, true)
	}()
	// While the sessions work, no session ever holds more RUNNING
	// attempts than its capacity.
	deadline := time.After(4 * bound)
	sample := time.NewTicker(20 * time.Millisecond)
	defer sample.Stop()
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-deadline:
			mu.Lock()
			t.Errorf("%d of %d tasks assigned within %s", len(assigned), total, 4*bound)
			mu.Unlock()
			closing.Do(func() { close(finished) })
			break wait
		case <-sample.C:
			held := e.count(t, `SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM task_attempts WHERE state = 'RUNNING' GROUP BY session_id) h`)
			if held > capacity {
				t.Errorf("a session holds %d RUNNING attempts, capacity %d", held, capacity)
			}
		}
	}
	wg.Wait()
	<-submitted
	for id, n := range assigned {
		if n != 1 {
			t.Errorf("task %s assigned %d times", id, n)
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM (SELECT task_id FROM task_attempts GROUP BY task_id HAVING COUNT(*) > 1) d`); n != 0 {
		t.Errorf("%d tasks have more than one attempt", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM task_attempts`); n != total {
		t.Errorf("%d attempts, want %d", n, total)
	}
	eventually(t, "every task SUCCEEDED", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM tasks WHERE state = 'SUCCEEDED'`) == total
	})
}

func TestT5_CompleteIdempotentByProof(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{Input: `{"order_id":42}`, Idempotent: true})
	a := w.assign(t)
	doctest.Check(t, docPath, "workers-assign", a.frame.Raw)
	if a.Task.ID != id || string(a.Task.Input) != `{"order_id":42}` {
		t.Fatalf("assignment %s, want task %s with its input", a.frame, id)
	}

	t.Run("WrongProofChangesNothing", func(t *testing.T) {
		wrong := map[string]func(p *proof){
			"Secret":  func(p *proof) { p.LeaseSecret = otherSecret(p.LeaseSecret) },
			"Epoch":   func(p *proof) { p.Epoch = "2" },
			"Attempt": func(p *proof) { p.AttemptID = wstest.NewID() },
			"Task":    func(p *proof) { p.TaskID = wstest.NewID() },
		}
		for name, change := range wrong {
			p := a.proof()
			change(&p)
			answer := w.complete(t, completeBody{proof: p, Outcome: tasks.OutcomeFailed})
			wantError(t, answer, string(httpx.CodeTaskLeaseLost))
			if name == "Secret" {
				doctest.Check(t, docPath, "workers-error-lease-lost", answer.Raw)
			}
			release := w.Request(typeRelease, releaseBody{proof: p, Reason: "not started"})
			wantError(t, release, string(httpx.CodeTaskLeaseLost))
			if got := e.task(t, e.cred, id); got.State != tasks.StateRunning || got.Revision != 2 || got.Attempts != 1 {
				t.Fatalf("wrong %s: task %s revision %d attempts %d, want RUNNING 2 1", name, got.State, got.Revision, got.Attempts)
			}
		}
		// The connection stayed open through every refusal.
		wantPingAck(t, w.ping(t))
	})

	t.Run("ProofForAnotherQueue", func(t *testing.T) {
		other := e.connect(t, e.credential(t, "other"), 1)
		answer := other.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded})
		wantError(t, answer, string(httpx.CodeTaskLeaseLost))
		if got := e.task(t, e.cred, id); got.State != tasks.StateRunning {
			t.Fatalf("task %s after a proof on another queue, want RUNNING", got.State)
		}
		wantPingAck(t, other.ping(t))
	})

	var first completeAck
	t.Run("Complete", func(t *testing.T) {
		body := completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded, Result: json.RawMessage(`{"charged":true,"amount":18446744073709551616}`)}
		f := w.NewFrame(typeComplete, body)
		answer := w.Reply(w.SendFrame(f))
		doctest.Check(t, docPath, "workers-complete", f.Raw)
		doctest.Check(t, docPath, "workers-ack-complete", answer.Raw)
		first = wantCompleteAck(t, answer)
		want := completeAck{TaskID: id, AttemptID: a.AttemptID, Outcome: tasks.OutcomeSucceeded, State: tasks.StateSucceeded, Revision: "3"}
		if first != want {
			t.Fatalf("ack %+v, want %+v", first, want)
		}
		got := e.task(t, e.cred, id)
		if got.State != tasks.StateSucceeded || string(got.Result) != `{"charged":true,"amount":18446744073709551616}` {
			t.Fatalf("task %s result %s", got.State, got.Result)
		}
	})

	t.Run("Repeat", func(t *testing.T) {
		// The same proof again, even with another outcome, returns the
		// original answer and changes nothing.
		for _, outcome := range []string{tasks.OutcomeSucceeded, tasks.OutcomeFailed} {
			answer := w.complete(t, completeBody{proof: a.proof(), Outcome: outcome})
			if outcome == tasks.OutcomeSucceeded {
				doctest.Check(t, docPath, "workers-ack-complete-deduplicated", answer.Raw)
			}
			again := wantCompleteAck(t, answer)
			want := first
			want.Deduplicated = true
			if again != want {
				t.Fatalf("repeat with outcome %s: ack %+v, want %+v", outcome, again, want)
			}
		}
		if got := e.task(t, e.cred, id); got.State != tasks.StateSucceeded || got.Revision != 3 {
			t.Fatalf("task %s revision %d after repeats, want SUCCEEDED 3", got.State, got.Revision)
		}
		if evs := eventSummary(e.events(t, id)); len(evs) != 1 || evs[0] != "task.succeeded/SUCCEEDED/COMPLETED" {
			t.Fatalf("events %v, want one task.succeeded", evs)
		}
	})

	t.Run("RepeatWithWrongSecret", func(t *testing.T) {
		p := a.proof()
		p.LeaseSecret = otherSecret(p.LeaseSecret)
		wantError(t, w.complete(t, completeBody{proof: p, Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	})
}

func TestT5_CompleteFromANewConnection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{})
	a := first.assign(t)
	first.Close()
	eventually(t, "the first session closed", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM worker_sessions WHERE id = ? AND closed_at IS NOT NULL`, first.session) == 1
	})

	second := e.connect(t, e.cred, 1)
	ack := wantCompleteAck(t, second.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeNeedsReview}))
	if ack.State != tasks.StateNeedsReview || ack.Deduplicated || ack.AttemptID != a.AttemptID {
		t.Fatalf("ack %+v, want NEEDS_REVIEW for attempt %s", ack, a.AttemptID)
	}
	if got := e.task(t, e.cred, id); got.State != tasks.StateNeedsReview || got.EffectUncertain {
		t.Fatalf("task %s uncertain %v, want NEEDS_REVIEW without effect_uncertain", got.State, got.EffectUncertain)
	}
	// A repeat on a third connection is still the same answer.
	third := e.connect(t, e.cred, 1)
	again := wantCompleteAck(t, third.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeNeedsReview}))
	ack.Deduplicated = true
	if again != ack {
		t.Fatalf("repeat %+v, want %+v", again, ack)
	}
}

func TestTaskRelease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{MaxAttempts: 1})
	a := w.assign(t)

	body := releaseBody{proof: a.proof(), Reason: "worker shutting down"}
	f := w.NewFrame(typeRelease, body)
	answer := w.Reply(w.SendFrame(f))
	doctest.Check(t, docPath, "workers-release", f.Raw)
	doctest.Check(t, docPath, "workers-ack-release", answer.Raw)
	var ack releaseAck
	decode(t, answer, &ack)
	if answer.Type != typeAck || ack != (releaseAck{TaskID: id, AttemptID: a.AttemptID, Released: true}) {
		t.Fatalf("answer %s", answer)
	}
	if row, _ := e.attempt(t, a.AttemptID); row.State != tasks.AttemptReleased {
		t.Fatalf("released attempt in state %s", row.State)
	}

	// The task went back to PENDING without using its only attempt, and
	// is leased again with a new epoch.
	b := w.assign(t)
	if b.Task.ID != id || b.AttemptID == a.AttemptID || b.Epoch != "2" || b.Task.Attempts != 1 || b.LeaseSecret == a.LeaseSecret {
		t.Fatalf("second assignment %s after %s", b.frame, a.frame)
	}
	evs := e.events(t, id)
	if got := eventSummary(evs); len(got) != 1 || got[0] != "task.requeued/PENDING/WORKER_RELEASED" || evs[0].Snapshot.EffectUncertain {
		t.Fatalf("events %v, want one task.requeued WORKER_RELEASED without effect_uncertain", got)
	}

	// Releasing the same lease again is harmless; completing it is not
	// possible any more.
	var again releaseAck
	decode(t, w.Request(typeRelease, body), &again)
	if again != ack {
		t.Fatalf("second release %+v, want %+v", again, ack)
	}
	wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	if got := w.succeed(t, b); got.State != tasks.StateSucceeded {
		t.Fatalf("ack %+v", got)
	}
	// A completed lease cannot be released.
	wantError(t, w.Request(typeRelease, releaseBody{proof: b.proof(), Reason: "late"}), string(httpx.CodeTaskLeaseLost))
	if got := e.task(t, e.cred, id); got.State != tasks.StateSucceeded || got.Attempts != 1 {
		t.Fatalf("task %s attempts %d, want SUCCEEDED after 1 attempt", got.State, got.Attempts)
	}
}

func TestTaskCancelFrame(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.connect(t, e.cred, 1)
	id := e.submit(t, e.cred, submitParams{})
	a := w.assign(t)

	receipt := e.cancel(t, e.cred, id)
	if receipt.State != tasks.StateRunning || !receipt.CancelRequested {
		t.Fatalf("cancel receipt %s cancel_requested %v, want RUNNING with cancel_requested", receipt.State, receipt.CancelRequested)
	}
	f := w.NextType(typeCancel)
	doctest.Check(t, docPath, "workers-cancel", f.Raw)
	var c cancelBody
	decode(t, f, &c)
	if c != (cancelBody{TaskID: id, AttemptID: a.AttemptID}) || f.ReplyTo != "" || f.SessionID != w.session {
		t.Fatalf("task.cancel %s", f)
	}
	// Once per attempt.
	w.ExpectNone(quiet)

	ack := wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeCancelled}))
	if ack.State != tasks.StateCancelled || ack.Outcome != tasks.OutcomeCancelled {
		t.Fatalf("ack %+v", ack)
	}
	if got := e.task(t, e.cred, id); got.State != tasks.StateCancelled {
		t.Fatalf("task %s, want CANCELLED", got.State)
	}
	if got := eventSummary(e.events(t, id)); len(got) != 1 || got[0] != "task.cancelled/CANCELLED/CANCEL_REQUESTED" {
		t.Fatalf("events %v, want task.cancelled CANCEL_REQUESTED", got)
	}
}
