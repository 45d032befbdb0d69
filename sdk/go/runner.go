package orbit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// job is one assigned task.
type job struct {
	task      AssignedTask
	secret    string
	cancelled chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	outcome   Outcome
}

// proof returns the lease proof of j's attempt.
func (j *job) proof() proof {
	return proof{TaskID: j.task.ID, AttemptID: j.task.AttemptID, Epoch: j.task.Epoch, LeaseSecret: j.secret}
}

// requestCancel cancels the handler's context and then closes
// j.cancelled, so that a handler woken by Cancelled finds its context done.
func (j *job) requestCancel() {
	j.cancel()
	select {
	case <-j.cancelled:
	default:
		close(j.cancelled)
	}
}

// report is an outcome waiting for the server's acknowledgement. Its body
// holds the lease secret and is never logged.
type report struct {
	kind      string // frameComplete or frameRelease
	taskID    string
	attemptID string
	outcome   string
	body      json.RawMessage
}

// connectResult is the end of one connection attempt.
type connectResult struct {
	sess       *session
	err        error
	fatal      bool
	retryAfter time.Duration
	resume     []proof  // the proofs the hello carried
	resumed    []string // the attempts the welcome says were adopted
}

// runner is the state of one Run. Everything but the handlers runs in the
// goroutine of Run.
type runner struct {
	w   *Worker
	log *slog.Logger

	handlerCtx     context.Context
	cancelHandlers context.CancelFunc
	handlers       sync.WaitGroup
	finished       chan *job // a handler returned; buffered to Capacity

	queued  []*job          // assigned and not started, in arrival order
	running map[string]*job // by attempt id
	reports []*report       // not yet acknowledged, in the order made

	sess          *session
	connecting    chan connectResult // nil unless a connection attempt runs
	cancelConnect context.CancelFunc
	retry         *time.Timer // nil unless waiting to reconnect
	failures      int         // connections failed or lost in a row

	draining   bool
	finalRound bool // draining and no handler left: release assignments at once
	gaveUp     bool
}

// newRunner prepares one Run. Handler contexts keep ctx's values but not
// its cancellation: a shutdown cancels them only after ShutdownTimeout.
func newRunner(ctx context.Context, w *Worker) *runner {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &runner{
		w: w, log: w.log,
		handlerCtx: hctx, cancelHandlers: cancel,
		finished: make(chan *job, w.cfg.Capacity),
		running:  make(map[string]*job),
	}
}

// run is the loop of Run: every state change happens here.
func (r *runner) run(ctx context.Context) error {
	defer r.cancelHandlers()
	var shutdown, giveUp <-chan time.Time
	stop := ctx.Done()
	r.startConnect(ctx)
	for {
		if r.draining && r.drained() {
			r.finish()
			return nil
		}
		var frames <-chan frame
		var beat, retry <-chan time.Time
		if r.sess != nil {
			frames, beat = r.sess.frames, r.sess.ticker.C
		}
		if r.retry != nil {
			retry = r.retry.C
		}
		select {
		case <-stop:
			stop = nil
			r.beginDrain()
			shutdown = time.After(r.w.cfg.ShutdownTimeout)
			giveUp = time.After(2 * r.w.cfg.ShutdownTimeout)
		case <-shutdown:
			shutdown = nil
			if len(r.running) > 0 {
				r.log.Warn("orbit worker: shutdown timeout passed; cancelling running handlers", slog.Int("running", len(r.running)))
			}
			r.cancelHandlers()
		case <-giveUp:
			giveUp = nil
			r.gaveUp = true
			if len(r.reports) > 0 {
				r.log.Error("orbit worker: giving up on unacknowledged outcomes at shutdown; the server's lease rules will settle them",
					slog.Int("unacknowledged", len(r.reports)))
			}
		case j := <-r.finished:
			r.handlerDone(j)
		case res := <-r.connecting:
			r.cancelConnect()
			r.connecting, r.cancelConnect = nil, nil
			if err := r.connected(res); err != nil {
				r.abort(err)
				return err
			}
		case <-retry:
			r.retry = nil
			r.startConnect(ctx)
		case <-beat:
			r.ping()
		case f, ok := <-frames:
			if !ok {
				r.lose(r.sess.err)
				continue
			}
			if err := r.handleFrame(f); err != nil {
				r.abort(err)
				return err
			}
		}
	}
}

// drained reports whether a shutdown has nothing left to wait for.
func (r *runner) drained() bool {
	if len(r.running) > 0 {
		return false
	}
	return r.gaveUp || (len(r.queued) == 0 && len(r.reports) == 0)
}

// beginDrain stops taking work and releases what has not started.
func (r *runner) beginDrain() {
	r.draining = true
	r.log.Info("orbit worker: shutting down", slog.Int("running", len(r.running)), slog.Int("not_started", len(r.queued)))
	r.releaseQueued("worker shutting down before the task started")
	r.finalRound = len(r.running) == 0
}

// releaseQueued turns every assigned but unstarted task into a release.
func (r *runner) releaseQueued(reason string) {
	queued := r.queued
	r.queued = nil
	for _, j := range queued {
		j.cancel()
		r.addReport(j, Release(reason))
	}
}

// startQueued starts queued tasks while there is capacity.
func (r *runner) startQueued() {
	for !r.draining && len(r.queued) > 0 && len(r.running) < r.w.cfg.Capacity {
		j := r.queued[0]
		r.queued = r.queued[1:]
		r.running[j.task.AttemptID] = j
		r.handlers.Add(1)
		go func() {
			defer r.handlers.Done()
			j.outcome = r.call(j)
			r.finished <- j
		}()
	}
}

// call runs the handler, turning a panic into a failure.
func (r *runner) call(j *job) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("orbit worker: task handler panicked", slog.String("task_id", j.task.ID),
				slog.String("attempt_id", j.task.AttemptID), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			out = Failed("HANDLER_PANIC", "the task handler panicked")
		}
	}()
	t := j.task // the handler gets its own copy
	return r.w.handler(j.ctx, &t)
}

// handlerDone records a handler's outcome for reporting.
func (r *runner) handlerDone(j *job) {
	delete(r.running, j.task.AttemptID)
	j.cancel()
	r.addReport(j, j.outcome)
	if r.draining && len(r.running) == 0 && !r.finalRound {
		r.finalRound = true
		r.releaseQueued("worker shutting down before the task started")
	}
	r.startQueued()
}

// addReport makes the report of an outcome and sends it if connected.
func (r *runner) addReport(j *job, o Outcome) {
	rep := &report{taskID: j.task.ID, attemptID: j.task.AttemptID}
	var body any
	switch o.kind {
	case outcomeRelease:
		reason := truncate(o.message, maxTextRunes)
		if reason == "" {
			reason = "released by the task handler"
		}
		rep.kind, rep.outcome = frameRelease, outcomeRelease
		body = releaseBody{proof: j.proof(), Reason: reason}
	default:
		c := completeBody{proof: j.proof(), Outcome: o.kind, Result: o.result}
		switch o.kind {
		case outcomeSucceeded, outcomeNeedsReview:
			if problem := checkResult(o.result); problem != "" {
				r.log.Error("orbit worker: cannot report the task's result; reporting needs_review without it",
					slog.String("task_id", j.task.ID), slog.String("attempt_id", j.task.AttemptID), slog.String("problem", problem))
				c.Outcome, c.Result = outcomeNeedsReview, nil
			}
		case outcomeFailed:
			c.Result = nil
			c.Error = &TaskError{Code: truncate(o.code, maxTextRunes), Message: truncate(o.message, maxTextRunes)}
		case outcomeCancelled:
			c.Result = nil
		default:
			c.Outcome, c.Result = outcomeFailed, nil
			c.Error = &TaskError{Code: "NO_OUTCOME", Message: "the task handler returned no outcome"}
		}
		rep.kind, rep.outcome = frameComplete, c.Outcome
		body = c
	}
	raw, err := json.Marshal(body)
	if err != nil { // Only a bug can get here: every field is checked.
		r.log.Error("orbit worker: cannot encode report", slog.String("task_id", j.task.ID), slog.String("error", err.Error()))
		return
	}
	rep.body = raw
	r.reports = append(r.reports, rep)
	r.send(rep)
}

// maxTextRunes bounds the error code, error message and release reason a
// worker reports, so that a report always fits in a frame.
const maxTextRunes = 1024

// truncate returns s cut to at most n runes.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// checkResult says why result cannot be reported, or "".
func checkResult(result json.RawMessage) string {
	switch {
	case len(result) == 0:
		return ""
	case len(result) > maxResultBytes:
		return fmt.Sprintf("result of %d bytes exceeds %d", len(result), maxResultBytes)
	case !json.Valid(result):
		return "result is not valid JSON"
	case nestedDeeper(result, maxResultDepth):
		// The server would close the connection on the frame, and the
		// report would be sent again on every new one.
		return fmt.Sprintf("result nests objects and arrays deeper than %d levels", maxResultDepth)
	}
	return ""
}

// nestedDeeper reports whether the valid JSON text v nests objects and
// arrays deeper than max levels, v's own outermost one being level 1.
func nestedDeeper(v []byte, max int) bool {
	depth := 0
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// send writes a report on the current connection, if any.
func (r *runner) send(rep *report) {
	if r.sess == nil {
		return
	}
	f := frame{ProtocolVersion: protocolVersion, Type: rep.kind, MessageID: newMessageID(), SessionID: r.sess.id, Body: rep.body}
	r.sess.inflight[f.MessageID] = rep
	if err := r.sess.write(f); err != nil {
		r.lose(err)
	}
}

// removeReport forgets an acknowledged or settled report.
func (r *runner) removeReport(rep *report) {
	for i, x := range r.reports {
		if x == rep {
			r.reports = append(r.reports[:i], r.reports[i+1:]...)
			return
		}
	}
}

// startConnect begins a connection attempt in the background. Its hello
// carries the proofs of the attempts whose handlers still run, so that the
// new session adopts their leases and its pings renew them.
func (r *runner) startConnect(ctx context.Context) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch := make(chan connectResult, 1)
	r.connecting, r.cancelConnect = ch, cancel
	resume := r.runningProofs()
	go func() { ch <- r.w.connect(cctx, resume) }()
}

// runningProofs returns the proofs of the attempts whose handlers run (and
// so have not been completed or released), ordered by attempt id; nil when
// none runs.
func (r *runner) runningProofs() []proof {
	if len(r.running) == 0 {
		return nil
	}
	out := make([]proof, 0, len(r.running))
	for _, j := range r.running {
		out = append(out, j.proof())
	}
	slices.SortFunc(out, func(a, b proof) int { return strings.Compare(a.AttemptID, b.AttemptID) })
	return out
}

// checkResumed logs what became of the leases a hello asked to resume.
// A lease the session did not adopt is no longer renewed: it was recovered
// by the server's lease rules, or will be when it expires, so the outcome
// its handler reports will most likely be refused with TASK_LEASE_LOST.
func (r *runner) checkResumed(res connectResult) {
	adopted := make(map[string]bool, len(res.resumed))
	for _, id := range res.resumed {
		adopted[id] = true
	}
	for _, p := range res.resume {
		j := r.running[p.AttemptID]
		switch {
		case adopted[p.AttemptID]:
			r.log.Debug("orbit worker: lease resumed", slog.String("task_id", p.TaskID), slog.String("attempt_id", p.AttemptID))
		case j != nil:
			r.log.Warn("orbit worker: the server did not resume the lease of a running task; its outcome will likely be refused",
				slog.String("task_id", p.TaskID), slog.String("attempt_id", p.AttemptID))
		}
	}
}

// connected takes the result of a connection attempt: it starts the
// session and sends what waits to be reported, or schedules a retry. It
// returns an error only when retrying cannot help.
func (r *runner) connected(res connectResult) error {
	if res.err != nil {
		if res.fatal {
			return res.err
		}
		delay := r.scheduleRetry(res.retryAfter)
		r.log.Warn("orbit worker: cannot connect; retrying", slog.String("error", res.err.Error()),
			slog.Int("failures", r.failures), slog.Duration("delay", delay))
		return nil
	}
	r.sess = res.sess
	r.log.Info("orbit worker: connected", slog.String("session_id", r.sess.id), slog.String("queue_id", r.w.cfg.QueueID),
		slog.Int("resumed", len(res.resumed)))
	r.checkResumed(res)
	for _, rep := range r.reports {
		if r.sess == nil {
			break
		}
		r.send(rep)
	}
	return nil
}

// scheduleRetry arms the reconnection timer with the next backoff delay,
// at least minDelay, and returns the delay.
func (r *runner) scheduleRetry(minDelay time.Duration) time.Duration {
	delay := max(backoffDelay(r.w.cfg.Backoff, r.failures, rand.Int64N), minDelay)
	r.failures++
	r.retry = time.NewTimer(delay)
	return delay
}

// lose ends the current session after a failure and schedules a reconnect.
// Assigned tasks that have not started are released on the next
// connection: their leases are no longer renewed. A session that lasted
// longer than the largest backoff resets the backoff; one that dropped
// quickly counts as a failure, so a flapping server is not hammered.
func (r *runner) lose(err error) {
	if r.sess == nil {
		return
	}
	r.log.Warn("orbit worker: connection lost; reconnecting", slog.String("session_id", r.sess.id), slog.String("error", errString(err)))
	if time.Since(r.sess.since) > r.w.cfg.Backoff.Max {
		r.failures = 0
	}
	r.sess.teardown()
	r.sess = nil
	r.releaseQueued("connection lost before the task started")
	r.scheduleRetry(0)
}

// abort ends Run after a non-retryable error: handlers are cancelled and
// awaited, and what was not reported is lost to the server's lease rules.
func (r *runner) abort(err error) {
	r.log.Error("orbit worker: stopping", slog.String("error", err.Error()),
		slog.Int("running", len(r.running)), slog.Int("unreported", len(r.reports)))
	r.cancelHandlers()
	r.handlers.Wait()
	r.stopConnecting()
	if r.sess != nil {
		r.sess.closeNormally()
		r.sess = nil
	}
}

// finish closes the connection normally at the end of a shutdown.
func (r *runner) finish() {
	r.stopConnecting()
	if r.sess != nil {
		for _, f := range r.sess.closeNormally() {
			if f.Type == frameAssign {
				r.log.Warn("orbit worker: a task was assigned while the connection closed; its lease will expire")
			}
		}
		r.sess = nil
	}
	r.handlers.Wait()
	r.log.Info("orbit worker: stopped")
}

// stopConnecting abandons a connection attempt or a pending retry.
func (r *runner) stopConnecting() {
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	if r.connecting != nil {
		r.cancelConnect()
		if res := <-r.connecting; res.sess != nil {
			res.sess.closeNormally()
		}
		r.connecting, r.cancelConnect = nil, nil
	}
}

// ping sends worker.ping, which renews every lease of the session.
func (r *runner) ping() {
	f, err := newFrame(framePing, r.sess.id, struct{}{})
	if err == nil {
		err = r.sess.write(f)
	}
	if err != nil {
		r.lose(err)
	}
}

// isFatal reports whether reconnecting cannot help after an error frame
// with code.
func isFatal(code string) bool {
	switch code {
	case CodeUnauthenticated, CodePermissionDenied, CodeNotFound:
		return true
	}
	return false
}

// handleFrame acts on one server frame. It returns an error only when Run
// must stop.
func (r *runner) handleFrame(f frame) error {
	switch f.Type {
	case frameAssign:
		r.assign(f)
	case frameCancel:
		r.cancelTask(f)
	case frameAck:
		rep := r.sess.inflight[f.ReplyTo]
		if rep == nil {
			return nil // a ping's ack, or a reply to an earlier session
		}
		delete(r.sess.inflight, f.ReplyTo)
		r.removeReport(rep)
		if rep.kind == frameComplete {
			var ack completeAck
			_ = json.Unmarshal(f.Body, &ack)
			r.log.Debug("orbit worker: outcome acknowledged", slog.String("task_id", rep.taskID),
				slog.String("attempt_id", rep.attemptID), slog.String("outcome", rep.outcome),
				slog.String("state", ack.State), slog.Bool("deduplicated", ack.Deduplicated))
		}
	case frameTypeError:
		e := f.apiError()
		rep := r.sess.inflight[f.ReplyTo]
		switch {
		case isFatal(e.Code):
			return e
		case rep != nil && (e.Code == CodeTaskLeaseLost || e.Code == CodeInvalidArgument):
			// Sending it again cannot succeed: for a lost lease, the
			// server's lease rules have taken over the task.
			delete(r.sess.inflight, f.ReplyTo)
			r.removeReport(rep)
			r.log.Warn("orbit worker: outcome refused", slog.String("task_id", rep.taskID),
				slog.String("attempt_id", rep.attemptID), slog.String("outcome", rep.outcome),
				slog.String("code", e.Code), slog.String("message", e.Message))
		case e.Code == CodeTaskLeaseLost:
		default:
			r.lose(e)
		}
	default:
		r.log.Debug("orbit worker: ignoring frame", slog.String("type", f.Type))
	}
	return nil
}

// assign queues an assigned task and starts it if there is capacity.
func (r *runner) assign(f frame) {
	a, err := assignOf(f)
	if err != nil || a.AttemptID == "" || a.Task.ID == "" {
		r.log.Error("orbit worker: ignoring an invalid task.assign", slog.String("error", errString(err)))
		return
	}
	if r.known(a.AttemptID) {
		return // a repeated assignment: the attempt runs, waits or is reported
	}
	ctx, cancel := context.WithCancel(r.handlerCtx)
	cancelled := make(chan struct{})
	j := &job{
		task: AssignedTask{
			ID: a.Task.ID, QueueID: a.Task.QueueID, Revision: a.Task.Revision, Input: a.Task.Input,
			Attempts: a.Task.Attempts, MaxAttempts: a.Task.MaxAttempts, Idempotent: a.Task.Idempotent,
			AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseUntil: a.LeaseUntil, Cancelled: cancelled, trace: a.Trace,
		},
		secret: a.LeaseSecret, cancelled: cancelled, ctx: ctx, cancel: cancel,
	}
	r.log.Debug("orbit worker: task assigned", slog.String("task_id", j.task.ID), slog.String("attempt_id", j.task.AttemptID))
	if r.finalRound {
		cancel()
		r.addReport(j, Release("worker shutting down before the task started"))
		return
	}
	r.queued = append(r.queued, j)
	r.startQueued()
}

// assignOf decodes the body of a task.assign frame, unless the reader
// decoded it already.
func assignOf(f frame) (assignBody, error) {
	if f.assign != nil {
		return *f.assign, nil
	}
	var a assignBody
	err := json.Unmarshal(f.Body, &a)
	return a, err
}

// known reports whether the attempt is running, queued or being reported.
func (r *runner) known(attemptID string) bool {
	if r.running[attemptID] != nil || r.queuedIndex(attemptID) >= 0 {
		return true
	}
	for _, rep := range r.reports {
		if rep.attemptID == attemptID {
			return true
		}
	}
	return false
}

// queuedIndex returns the position of the attempt in the queue, or -1.
func (r *runner) queuedIndex(attemptID string) int {
	for i, j := range r.queued {
		if j.task.AttemptID == attemptID {
			return i
		}
	}
	return -1
}

// cancelTask passes a task.cancel to the task's handler, or releases the
// task if it has not started.
func (r *runner) cancelTask(f frame) {
	var c cancelBody
	if err := json.Unmarshal(f.Body, &c); err != nil {
		r.log.Error("orbit worker: ignoring an invalid task.cancel", slog.String("error", err.Error()))
		return
	}
	if j := r.running[c.AttemptID]; j != nil {
		r.log.Debug("orbit worker: task cancel requested", slog.String("task_id", j.task.ID), slog.String("attempt_id", c.AttemptID))
		j.requestCancel()
		return
	}
	if i := r.queuedIndex(c.AttemptID); i >= 0 {
		j := r.queued[i]
		r.queued = append(r.queued[:i], r.queued[i+1:]...)
		j.requestCancel()
		r.addReport(j, Release("cancel requested before the task started"))
	}
}

// backoffDelay returns the delay before the next connection attempt after
// failures failed attempts in a row: uniformly random in [0, cap) where cap
// doubles from cfg.Initial up to cfg.Max. randN returns a number in [0, n).
func backoffDelay(cfg BackoffConfig, failures int, randN func(n int64) int64) time.Duration {
	limit := cfg.Initial
	for i := 0; i < failures && limit < cfg.Max; i++ {
		limit *= 2
	}
	limit = min(limit, cfg.Max)
	if limit <= 0 {
		return 0
	}
	return time.Duration(randN(int64(limit)))
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
