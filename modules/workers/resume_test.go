package workers_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
)

// resumeHelloBody is the body of a worker.hello that resumes leases.
type resumeHelloBody struct {
	QueueID    string  `json:"queue_id"`
	Capacity   int     `json:"capacity"`
	WorkerName string  `json:"worker_name,omitempty"`
	Resume     []proof `json:"resume,omitempty"`
}

// resumedWelcome is the body of worker.welcome with the attempts adopted.
type resumedWelcome struct {
	welcomeBody
	Resumed []string `json:"resumed"`
}

// resumeHello sends, on a new connection of cred, a hello of capacity that
// resumes proofs.
func (e *env) resumeHello(t *testing.T, cred servertest.Credential, capacity int, proofs []proof) (*wstest.Client, *wstest.Frame) {
	t.Helper()
	c := e.dial(t, cred)
	hello := c.NewFrame(typeHello, resumeHelloBody{QueueID: cred.QueueID, Capacity: capacity, WorkerName: "worker-1", Resume: proofs})
	c.SendFrame(hello)
	return c, hello
}

// resume opens a session of cred with capacity whose hello resumes proofs,
// and returns it with the attempts the welcome says were adopted (never
// nil).
func (e *env) resume(t *testing.T, cred servertest.Credential, capacity int, proofs []proof) (*worker, []string) {
	t.Helper()
	c, hello := e.resumeHello(t, cred, capacity, proofs)
	welcome := c.Reply(hello.MessageID)
	if welcome.Type != typeWelcome {
		t.Fatalf("answer to a hello with resume: %s, want worker.welcome", welcome)
	}
	var body resumedWelcome
	decode(t, welcome, &body)
	if body.Resumed == nil {
		t.Fatalf("welcome without resumed: %s", welcome)
	}
	w := &worker{Client: c, hello: hello, welcome: welcome, body: body.welcomeBody}
	w.session = body.SessionID
	c.SetSession(w.session)
	return w, body.Resumed
}

// wantSession checks that the attempt is RUNNING and held by session.
func (e *env) wantSession(t *testing.T, attemptID, session string) attemptRow {
	t.Helper()
	row, ok := e.attempt(t, attemptID)
	if !ok || row.State != tasks.AttemptRunning || row.SessionID != session {
		t.Fatalf("attempt %s: state %s session %s, want RUNNING held by %s", attemptID, row.State, row.SessionID, session)
	}
	return row
}

// setupResume starts a server with the default lease duration whose
// sweeper runs every shortSweep.
func setupResume(t *testing.T) *env {
	t.Helper()
	return setup(t, tasksConfig(func(c *tasks.Config) { c.SweepInterval = shortSweep }))
}

func TestResume_AdoptedLeaseIsRenewedByTheNewSession(t *testing.T) {
	t.Parallel()
	e := setupShortLeases(t)
	cred := e.credential(t, "renew")
	old := e.connect(t, cred, 1)
	id := e.submit(t, cred, submitParams{Idempotent: false})
	a := old.assign(t)
	// The connection drops while the worker still runs the task.
	old.Close()

	w, resumed := e.resume(t, cred, 1, []proof{a.proof()})
	if !slices.Equal(resumed, []string{a.AttemptID}) {
		t.Fatalf("resumed %v, want [%s]", resumed, a.AttemptID)
	}
	row := e.wantSession(t, a.AttemptID, w.session)
	if !row.LeaseUntil.After(parseTime(t, a.LeaseUntil)) {
		t.Fatalf("adopted lease_until %s, not renewed past the assignment's %s", row.LeaseUntil, a.LeaseUntil)
	}
	// The new session's pings keep the lease for well over two lease
	// durations; without the adoption it would expire after one.
	end := time.Now().Add(2*shortLease + shortLease/2)
	heartbeat := time.NewTicker(shortLease / 5)
	defer heartbeat.Stop()
	for time.Now().Before(end) {
		<-heartbeat.C
		wantPingAck(t, w.ping(t))
		e.wantSession(t, a.AttemptID, w.session)
	}
	if time.Now().Before(parseTime(t, a.LeaseUntil).Add(shortLease)) {
		t.Fatal("the test did not outlast the original lease")
	}
	ack := w.succeed(t, a)
	if ack.State != tasks.StateSucceeded || ack.Deduplicated || ack.AttemptID != a.AttemptID {
		t.Fatalf("ack %+v, want SUCCEEDED", ack)
	}
	got := e.task(t, cred, id)
	if got.State != tasks.StateSucceeded || got.EffectUncertain || got.Attempts != 1 {
		t.Fatalf("task %+v, want SUCCEEDED after one attempt without effect_uncertain", got)
	}
	if sum := eventSummary(e.events(t, id)); len(sum) != 1 || sum[0] != "task.succeeded/SUCCEEDED/COMPLETED" {
		t.Fatalf("events %v, want only task.succeeded", sum)
	}
}

func TestResume_OnlyValidProofsAreAdopted(t *testing.T) {
	t.Parallel()
	e := setupResume(t)
	cred := e.credential(t, "valid")
	foreign := e.credential(t, "foreign")
	ctx := context.Background()

	// A lease that expired and was recovered by the sweeper (T-6).
	holder := e.connect(t, cred, 4)
	expiredID := e.submit(t, cred, submitParams{Idempotent: false})
	expired := holder.assign(t)
	if _, err := e.srv.DB.ExecContext(ctx, `UPDATE task_attempts SET lease_until = ? WHERE id = ?`, time.Now().Add(-time.Minute), expired.AttemptID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, cred, expiredID, tasks.StateNeedsReview)
	// A completed and a released lease.
	e.submit(t, cred, submitParams{Idempotent: true})
	completed := holder.assign(t)
	holder.succeed(t, completed)
	e.submit(t, cred, submitParams{Idempotent: false})
	released := holder.assign(t)
	if f := holder.Request(typeRelease, releaseBody{proof: released.proof(), Reason: "not started"}); f.Type != typeAck {
		t.Fatalf("release answer %s", f)
	}
	// The released task is offered again: two live leases remain, one to
	// resume as it is and one to resume with wrong proofs.
	again := holder.assign(t)
	e.submit(t, cred, submitParams{Idempotent: false})
	live := holder.assign(t)
	if again.Task.ID != released.Task.ID {
		again, live = live, again
	}
	// A live lease of another queue.
	other := e.connect(t, foreign, 1)
	e.submit(t, foreign, submitParams{Idempotent: false})
	foreignLease := other.assign(t)
	holder.Close()

	wrongSecret := again.proof()
	wrongSecret.LeaseSecret = otherSecret(wrongSecret.LeaseSecret)
	wrongEpoch := again.proof()
	wrongEpoch.Epoch = "1" // again is the second assignment of its task
	wrongTask := again.proof()
	wrongTask.TaskID = live.Task.ID
	unknown := proof{TaskID: wstest.NewID(), AttemptID: wstest.NewID(), Epoch: "1", LeaseSecret: otherSecret("")}
	proofs := []proof{
		expired.proof(), completed.proof(), released.proof(), wrongSecret, wrongEpoch, wrongTask,
		foreignLease.proof(), unknown, live.proof(), live.proof(),
	}
	w, resumed := e.resume(t, cred, len(proofs), proofs)
	if !slices.Equal(resumed, []string{live.AttemptID}) {
		t.Fatalf("resumed %v, want only [%s]", resumed, live.AttemptID)
	}
	e.wantSession(t, live.AttemptID, w.session)
	// What was not adopted is unchanged.
	e.wantSession(t, again.AttemptID, holder.session)
	e.wantSession(t, foreignLease.AttemptID, other.session)
	for _, a := range []*assignment{expired, completed, released} {
		if row, _ := e.attempt(t, a.AttemptID); row.SessionID != holder.session || row.State == tasks.AttemptRunning {
			t.Fatalf("ended attempt %s: session %s state %s", a.AttemptID, row.SessionID, row.State)
		}
	}
	if got := e.task(t, cred, expiredID); got.State != tasks.StateNeedsReview || !got.EffectUncertain {
		t.Fatalf("expired task %+v, want NEEDS_REVIEW with effect_uncertain", got)
	}
	// The proofs that were not adopted still cannot complete anything.
	for _, p := range []proof{expired.proof(), released.proof(), wrongSecret, wrongEpoch, wrongTask, unknown} {
		wantError(t, w.complete(t, completeBody{proof: p, Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	}
	// A proof of another queue completes only on a session of that queue.
	wantError(t, w.complete(t, completeBody{proof: foreignLease.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	other.succeed(t, foreignLease)
	if ack := w.succeed(t, live); ack.State != tasks.StateSucceeded || ack.Deduplicated {
		t.Fatalf("ack %+v", ack)
	}
}

func TestResume_AdoptedLeasesCountAgainstCapacity(t *testing.T) {
	t.Parallel()
	e := setupResume(t)

	t.Run("CapacityOne", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "one")
		old := e.connect(t, cred, 1)
		e.submit(t, cred, submitParams{Idempotent: false})
		a := old.assign(t)
		old.Close()
		waiting := e.submit(t, cred, submitParams{Idempotent: false})

		w, resumed := e.resume(t, cred, 1, []proof{a.proof()})
		doctest.Check(t, docPath, "workers-hello-resume", w.hello.Raw)
		doctest.Check(t, docPath, "workers-welcome-resumed", w.welcome.Raw)
		if !slices.Equal(resumed, []string{a.AttemptID}) {
			t.Fatalf("resumed %v", resumed)
		}
		// The adopted lease fills the session: the waiting task is not
		// assigned until it ends.
		w.ExpectNone(quiet)
		if got := e.task(t, cred, waiting); got.State != tasks.StatePending {
			t.Fatalf("waiting task %s, want PENDING", got.State)
		}
		w.succeed(t, a)
		b := w.assign(t)
		if b.Task.ID != waiting {
			t.Fatalf("assigned %s, want the waiting task %s", b.Task.ID, waiting)
		}
		e.wantPersisted(t, b, w.session)
		w.succeed(t, b)
	})

	t.Run("CapacityTwo", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "two")
		old := e.connect(t, cred, 1)
		e.submit(t, cred, submitParams{Idempotent: false})
		a := old.assign(t)
		old.Close()
		for range 3 {
			e.submit(t, cred, submitParams{Idempotent: false})
		}
		w, resumed := e.resume(t, cred, 2, []proof{a.proof()})
		if !slices.Equal(resumed, []string{a.AttemptID}) {
			t.Fatalf("resumed %v", resumed)
		}
		// One slot is left for the three waiting tasks.
		b := w.assign(t)
		w.ExpectNone(quiet)
		if n := e.count(t, `SELECT COUNT(*) FROM task_attempts WHERE session_id = ? AND state = 'RUNNING'`, w.session); n != 2 {
			t.Fatalf("%d RUNNING attempts for the session, want 2", n)
		}
		w.succeed(t, b)
		w.assign(t)
	})

	t.Run("NothingToResume", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "none")
		// A hello without resume gets an empty resumed, as does one whose
		// proofs are all worthless.
		w := e.connect(t, cred, 1)
		var body map[string]json.RawMessage
		decode(t, w.welcome, &body)
		if string(body["resumed"]) != "[]" {
			t.Fatalf("welcome %s, want resumed []", w.welcome)
		}
		unknown := proof{TaskID: wstest.NewID(), AttemptID: wstest.NewID(), Epoch: "1", LeaseSecret: otherSecret("")}
		w.Close()
		w2, resumed := e.resume(t, cred, 1, []proof{unknown})
		if len(resumed) != 0 {
			t.Fatalf("resumed %v, want none", resumed)
		}
		// The session has its full capacity.
		id := e.submit(t, cred, submitParams{Idempotent: false})
		if a := w2.assign(t); a.Task.ID != id {
			t.Fatalf("assigned %s, want %s", a.Task.ID, id)
		}
	})
}

func TestResume_HelloRefused(t *testing.T) {
	t.Parallel()
	e := setupResume(t)
	cred := e.credential(t, "refused")
	holder := e.connect(t, cred, 2)
	e.submit(t, cred, submitParams{Idempotent: false})
	e.submit(t, cred, submitParams{Idempotent: false})
	a, b := holder.assign(t), holder.assign(t)

	// refused sends hello (valid or not for the schema) and expects
	// INVALID_ARGUMENT and the close, with the leases left where they were.
	refused := func(t *testing.T, body any, valid bool) {
		t.Helper()
		c := e.dial(t, cred)
		f := c.NewFrame(typeHello, body)
		if valid {
			c.SendFrame(f)
		} else {
			c.SendInvalid(f)
		}
		answer := c.Reply(f.MessageID)
		wantError(t, answer, "INVALID_ARGUMENT")
		if answer.SessionID != "" {
			t.Fatalf("error answering a refused hello carries session_id: %s", answer)
		}
		c.ExpectClose(closePolicyViolation)
		e.wantSession(t, a.AttemptID, holder.session)
		e.wantSession(t, b.AttemptID, holder.session)
	}

	t.Run("MoreThanCapacity", func(t *testing.T) {
		// The schema cannot relate resume to capacity; the server does.
		refused(t, resumeHelloBody{QueueID: cred.QueueID, Capacity: 1, Resume: []proof{a.proof(), b.proof()}}, true)
	})
	t.Run("MoreThanMaxResume", func(t *testing.T) {
		proofs := make([]proof, workers.MaxResume+1)
		for i := range proofs {
			proofs[i] = a.proof()
		}
		refused(t, resumeHelloBody{QueueID: cred.QueueID, Capacity: workers.MaxCapacity, Resume: proofs}, false)
	})
	t.Run("ProofWithoutSecret", func(t *testing.T) {
		p := map[string]any{"task_id": a.Task.ID, "attempt_id": a.AttemptID, "epoch": a.Epoch}
		refused(t, map[string]any{"queue_id": cred.QueueID, "capacity": 1, "resume": []any{p}}, false)
	})
	t.Run("ProofWithUnknownMember", func(t *testing.T) {
		p := map[string]any{"task_id": a.Task.ID, "attempt_id": a.AttemptID, "epoch": a.Epoch, "lease_secret": a.LeaseSecret, "outcome": "succeeded"}
		refused(t, map[string]any{"queue_id": cred.QueueID, "capacity": 1, "resume": []any{p}}, false)
	})
	t.Run("ProofEpochNumber", func(t *testing.T) {
		p := map[string]any{"task_id": a.Task.ID, "attempt_id": a.AttemptID, "epoch": 1, "lease_secret": a.LeaseSecret}
		refused(t, map[string]any{"queue_id": cred.QueueID, "capacity": 1, "resume": []any{p}}, false)
	})
	t.Run("ProofNull", func(t *testing.T) {
		refused(t, map[string]any{"queue_id": cred.QueueID, "capacity": 1, "resume": []any{nil}}, false)
	})

	// The holder's leases were never touched: they still complete.
	holder.succeed(t, a)
	holder.succeed(t, b)
}

func TestResume_SchemaRefusals(t *testing.T) {
	t.Parallel()
	e := setupResume(t)
	v := schema(t)
	cred := e.credential(t, "schema")
	old := e.connect(t, cred, 1)
	e.submit(t, cred, submitParams{Idempotent: false})
	a := old.assign(t)
	old.Close()
	w, _ := e.resume(t, cred, 1, []proof{a.proof()})
	w.succeed(t, a)
	for _, r := range w.Records() {
		if !r.Checked || r.Err != nil {
			t.Fatalf("%s frame not validated or invalid (%v): %s", r.Direction, r.Err, r.Raw)
		}
	}

	refused := []struct {
		name   string
		def    string
		frame  []byte
		change func(f map[string]any)
	}{
		{"WelcomeWithoutResumed", wstest.ServerFrame, w.welcome.Raw, func(f map[string]any) { delete(body(f), "resumed") }},
		{"WelcomeResumedNotIDs", wstest.ServerFrame, w.welcome.Raw, func(f map[string]any) { body(f)["resumed"] = []any{"x"} }},
		{"WelcomeResumedTwice", wstest.ServerFrame, w.welcome.Raw, func(f map[string]any) {
			body(f)["resumed"] = []any{a.AttemptID, a.AttemptID}
		}},
		{"ResumeNotAnArray", wstest.ClientFrame, w.hello.Raw, func(f map[string]any) { body(f)["resume"] = body(f)["resume"].([]any)[0] }},
		{"ResumeEntryMissingEpoch", wstest.ClientFrame, w.hello.Raw, func(f map[string]any) {
			delete(body(f)["resume"].([]any)[0].(map[string]any), "epoch")
		}},
		{"ResumeEntryExtraMember", wstest.ClientFrame, w.hello.Raw, func(f map[string]any) {
			body(f)["resume"].([]any)[0].(map[string]any)["outcome"] = "succeeded"
		}},
		{"ResumeOver32", wstest.ClientFrame, w.hello.Raw, func(f map[string]any) {
			entry := body(f)["resume"].([]any)[0]
			body(f)["resume"] = slices.Repeat([]any{entry}, 33)
		}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			f := decodeMap(t, tt.frame)
			tt.change(f)
			changed, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Validate(tt.def, changed); err == nil {
				t.Fatalf("the schema accepts %s", changed)
			}
		})
	}
}
