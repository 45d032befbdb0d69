package workers_test

import (
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/tasks"
	"github.com/orbitrun/orbit/modules/workers"
)

// Short leases, so that tests can let them expire.
const (
	shortLease     = time.Second
	shortHeartbeat = 500 * time.Millisecond
	shortSweep     = 100 * time.Millisecond
)

// setupShortLeases starts a server with leases of one second whose
// sweeper runs every 100 ms.
func setupShortLeases(t *testing.T) *env {
	t.Helper()
	return setup(t,
		workersConfig(func(c *workers.Config) { c.LeaseDuration, c.HeartbeatInterval = shortLease, shortHeartbeat }),
		tasksConfig(func(c *tasks.Config) { c.SweepInterval = shortSweep }),
	)
}

func TestT6_LeaseExpiry(t *testing.T) {
	t.Parallel()
	e := setupShortLeases(t)

	t.Run("WelcomeTellsTheLease", func(t *testing.T) {
		t.Parallel()
		w := e.connect(t, e.credential(t, "welcome"), 1)
		if w.body.LeaseDurationMS != shortLease.Milliseconds() || w.body.HeartbeatIntervalMS != shortHeartbeat.Milliseconds() {
			t.Fatalf("welcome %s", w.welcome)
		}
	})

	t.Run("IdempotentIsRequeued", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "requeue")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: true, MaxAttempts: 3})
		a := w.assign(t)
		// Without a ping the lease expires, the sweeper requeues the task
		// and the session, whose slot is free again, leases it anew.
		b := w.assign(t)
		// Renew the new lease at once, so that it cannot expire too, and
		// show that the old proof is refused while the new lease runs.
		wantPingAck(t, w.ping(t))
		wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
		if ack := w.succeed(t, b); ack.State != tasks.StateSucceeded {
			t.Fatalf("ack %+v", ack)
		}
		if time.Now().Before(parseTime(t, a.LeaseUntil)) {
			t.Fatalf("reassigned before the first lease ended at %s", a.LeaseUntil)
		}
		if b.Task.ID != id || b.AttemptID == a.AttemptID || b.Epoch != "2" || b.Task.Attempts != 2 || b.LeaseSecret == a.LeaseSecret {
			t.Fatalf("second assignment %s after %s", b.frame, a.frame)
		}
		if row, _ := e.attempt(t, a.AttemptID); row.State != tasks.AttemptExpired {
			t.Fatalf("first attempt in state %s, want EXPIRED", row.State)
		}
		evs := e.events(t, id)
		if got := eventSummary(evs); len(got) != 2 || got[0] != "task.requeued/PENDING/LEASE_EXPIRED" || got[1] != "task.succeeded/SUCCEEDED/COMPLETED" {
			t.Fatalf("events %v, want task.requeued LEASE_EXPIRED, then task.succeeded", got)
		}
		// The expired lease's proof stays worthless.
		wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
		wantError(t, w.Request(typeRelease, releaseBody{proof: a.proof(), Reason: "late"}), string(httpx.CodeTaskLeaseLost))
		if got := e.task(t, cred, id); got.Attempts != 2 || got.EffectUncertain {
			t.Fatalf("task attempts %d uncertain %v, want 2 and false", got.Attempts, got.EffectUncertain)
		}
	})

	t.Run("IdempotentExhaustedFails", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "exhausted")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: true, MaxAttempts: 1})
		a := w.assign(t)
		got := e.waitState(t, cred, id, tasks.StateFailed)
		if !got.EffectUncertain || got.Error == nil || got.Error.Code != tasks.ReasonLeaseExpired || got.Attempts != 1 {
			t.Fatalf("task %+v, want FAILED with effect_uncertain and error LEASE_EXPIRED", got)
		}
		evs := e.events(t, id)
		if sum := eventSummary(evs); len(sum) != 1 || sum[0] != "task.failed/FAILED/LEASE_EXPIRED" || !evs[0].Snapshot.EffectUncertain {
			t.Fatalf("events %v, want one task.failed LEASE_EXPIRED with effect_uncertain", sum)
		}
		wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	})

	t.Run("NotIdempotentNeedsReview", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "review")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: false, MaxAttempts: 3})
		a := w.assign(t)
		got := e.waitState(t, cred, id, tasks.StateNeedsReview)
		if !got.EffectUncertain || got.Attempts != 1 {
			t.Fatalf("task %+v, want NEEDS_REVIEW with effect_uncertain", got)
		}
		evs := e.events(t, id)
		if sum := eventSummary(evs); len(sum) != 1 || sum[0] != "task.needs_review/NEEDS_REVIEW/LEASE_EXPIRED" || !evs[0].Snapshot.EffectUncertain {
			t.Fatalf("events %v, want one task.needs_review LEASE_EXPIRED with effect_uncertain", sum)
		}
		wantError(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
		// Nobody leases a task in review.
		w.ExpectNone(quiet)
	})

	t.Run("PingsKeepTheLease", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "pings")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: true})
		a := w.assign(t)
		first := parseTime(t, a.LeaseUntil)
		// Ping at the heartbeat interval for well over two lease
		// durations: the lease must outlive them.
		end := time.Now().Add(2*shortLease + shortLease/2)
		heartbeat := time.NewTicker(shortLease / 5)
		defer heartbeat.Stop()
		pings := 0
		for time.Now().Before(end) {
			<-heartbeat.C
			f := w.NewFrame(typePing, struct{}{})
			answer := w.Reply(w.SendFrame(f))
			wantPingAck(t, answer)
			if pings++; pings == 1 {
				doctest.Check(t, docPath, "workers-ping", f.Raw)
				doctest.Check(t, docPath, "workers-ack-ping", answer.Raw)
			}
			if row, _ := e.attempt(t, a.AttemptID); row.State != tasks.AttemptRunning {
				t.Fatalf("attempt %s after %d pings", row.State, pings)
			}
		}
		row, _ := e.attempt(t, a.AttemptID)
		if !row.LeaseUntil.After(first.Add(shortLease)) {
			t.Fatalf("lease_until %s, first %s: the pings did not renew the lease", row.LeaseUntil, first)
		}
		ack := w.succeed(t, a)
		if ack.State != tasks.StateSucceeded || ack.Deduplicated {
			t.Fatalf("ack %+v", ack)
		}
		if got := e.task(t, cred, id); got.Attempts != 1 || got.EffectUncertain {
			t.Fatalf("task attempts %d uncertain %v", got.Attempts, got.EffectUncertain)
		}
	})

	t.Run("PingsOfAnotherSessionDoNotRenew", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "bound")
		holder := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: false})
		holder.assign(t)
		// Another session of the same credential and queue keeps pinging;
		// the holder stays silent. Its lease expires all the same.
		other := e.connect(t, cred, 1)
		eventually(t, "the holder's lease expired", func() bool {
			wantPingAck(t, other.ping(t))
			return e.task(t, cred, id).State == tasks.StateNeedsReview
		})
	})
}

func TestT7_FailedRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	const backoffMin, backoffMax = 200 * time.Millisecond, 400 * time.Millisecond
	e := setup(t, tasksConfig(func(c *tasks.Config) { c.RetryBackoffMin, c.RetryBackoffMax = backoffMin, backoffMax }))
	failure := &taskError{Code: "UPSTREAM_TIMEOUT", Message: "the payment service did not answer"}

	t.Run("IdempotentIsRetried", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "retry")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: true, MaxAttempts: 3})
		a := w.assign(t)
		// The delay doubles with every attempt, up to the maximum.
		for attempt, backoff := range []time.Duration{backoffMin, backoffMax} {
			failedAt := time.Now()
			answer := w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeFailed, Error: failure})
			if attempt == 0 {
				doctest.Check(t, docPath, "workers-ack-complete-retry", answer.Raw)
			}
			if ack := wantCompleteAck(t, answer); ack.State != tasks.StatePending || ack.Outcome != tasks.OutcomeFailed {
				t.Fatalf("ack %+v, want PENDING for a retry", ack)
			}
			next := w.assign(t)
			if waited := time.Since(failedAt); waited < backoff {
				t.Fatalf("attempt %d offered again after %s, before the backoff of %s", attempt+2, waited, backoff)
			}
			if next.Task.ID != id || next.Task.Attempts != attempt+2 || next.Epoch != jsonUint(uint64(attempt+2)) {
				t.Fatalf("assignment %s", next.frame)
			}
			a = next
		}
		ack := wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeFailed, Error: failure}))
		if ack.State != tasks.StateFailed {
			t.Fatalf("ack %+v, want FAILED after the last attempt", ack)
		}
		got := e.task(t, cred, id)
		if got.State != tasks.StateFailed || got.Attempts != 3 || got.EffectUncertain || got.Error == nil || *got.Error != tasks.TaskError(*failure) {
			t.Fatalf("task %+v", got)
		}
		want := []string{"task.requeued/PENDING/ATTEMPT_FAILED", "task.requeued/PENDING/ATTEMPT_FAILED", "task.failed/FAILED/ATTEMPT_FAILED"}
		evs := e.events(t, id)
		if sum := eventSummary(evs); len(sum) != len(want) || sum[0] != want[0] || sum[1] != want[1] || sum[2] != want[2] {
			t.Fatalf("events %v, want %v", sum, want)
		}
		for _, ev := range evs {
			if ev.Details.ErrorCode != failure.Code {
				t.Fatalf("event %s error_code %q, want %q", ev.Type, ev.Details.ErrorCode, failure.Code)
			}
		}
		w.ExpectNone(quiet)
	})

	t.Run("NotIdempotentFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		cred := e.credential(t, "once")
		w := e.connect(t, cred, 1)
		id := e.submit(t, cred, submitParams{Idempotent: false, MaxAttempts: 3})
		a := w.assign(t)
		ack := wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeFailed, Error: failure}))
		if ack.State != tasks.StateFailed {
			t.Fatalf("ack %+v, want FAILED", ack)
		}
		if got := e.task(t, cred, id); got.State != tasks.StateFailed || got.Attempts != 1 || got.EffectUncertain {
			t.Fatalf("task %+v", got)
		}
		w.ExpectNone(quiet)
	})
}
