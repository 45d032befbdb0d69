package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Frame types of orbit.workers.v1.
const (
	typeHello    = "worker.hello"
	typeWelcome  = "worker.welcome"
	typeAssign   = "task.assign"
	typeComplete = "task.complete"
	typeRelease  = "task.release"
	typeCancel   = "task.cancel"
	typePing     = "worker.ping"
	typeAck      = "ack"
)

// maxResume is the largest number of lease proofs a worker.hello may carry
// in resume, as many as the largest capacity.
const maxResume = maxCapacity

type helloBody struct {
	QueueID    *string `json:"queue_id"`
	Capacity   *int    `json:"capacity"`
	WorkerName *string `json:"worker_name"`
	// Resume holds the proofs of leases the worker still runs from an
	// earlier connection; the session adopts those that are still valid.
	Resume []proofBody `json:"resume"`
}

type welcomeBody struct {
	SessionID           string `json:"session_id"`
	QueueID             string `json:"queue_id"`
	Capacity            int    `json:"capacity"`
	LeaseDurationMS     int64  `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	ServerTime          string `json:"server_time"`
	// Resumed lists the attempts of the hello's resume that the session
	// adopted; never null.
	Resumed []string `json:"resumed"`
}

type assignedTask struct {
	ID          string         `json:"id"`
	QueueID     string         `json:"queue_id"`
	Revision    httpx.Uint64   `json:"revision"`
	Input       jsontext.Value `json:"input"`
	Attempts    int            `json:"attempts"`
	MaxAttempts int            `json:"max_attempts"`
	Idempotent  bool           `json:"idempotent"`
}

type assignBody struct {
	Task        assignedTask `json:"task"`
	AttemptID   string       `json:"attempt_id"`
	Epoch       httpx.Uint64 `json:"epoch"`
	LeaseUntil  string       `json:"lease_until"`
	LeaseSecret string       `json:"lease_secret"`
	// Trace is the task's W3C trace context, or the assignment span's
	// when the node traces; left out when the task has none (O-5).
	Trace *tracing.Context `json:"trace,omitzero"`
}

type proofBody struct {
	TaskID      *string       `json:"task_id"`
	AttemptID   *string       `json:"attempt_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *wsx.Secret   `json:"lease_secret"`
}

type completeBody struct {
	proofBody
	Outcome *string          `json:"outcome"`
	Result  jsontext.Value   `json:"result"`
	Error   *tasks.TaskError `json:"error"`
}

type releaseBody struct {
	proofBody
	Reason *string `json:"reason"`
}

type cancelBody struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
}

type pingAck struct {
	ServerTime string `json:"server_time"`
}

type releaseAck struct {
	TaskID    string `json:"task_id"`
	AttemptID string `json:"attempt_id"`
	Released  bool   `json:"released"`
}

// connect serves one worker connection: hello, welcome, then requests until
// the connection ends. The session's dispatcher leases tasks and sends
// task.assign and task.cancel frames, apart from the request loop, so that
// pings and completions never wait behind leasing.
func (m *Module) connect(w http.ResponseWriter, r *http.Request) {
	m.entry.Serve(w, r, typeHello, m.hello)
}

// hello answers worker.hello: it records the session within the
// application's connection limit (N-4), adopts the leases the hello resumes
// and answers worker.welcome.
func (m *Module) hello(c *wsx.Conn, f *wsx.Frame, r *http.Request) (wsx.Session, error) {
	var body helloBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		return nil, err
	}
	if err := wsx.CheckHello("queue_id", body.QueueID, body.Capacity, maxCapacity); err != nil {
		return nil, err
	}
	name := ""
	if body.WorkerName != nil {
		name = *body.WorkerName
		if !httpx.ValidName(name, 128) {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "body.worker_name must be a valid name of at most 128 characters")
		}
	}
	resume, err := resumeProofs(body.Resume, *body.Capacity, *body.QueueID)
	if err != nil {
		return nil, err
	}
	p := c.Principal()
	if !p.HasQueue(*body.QueueID) {
		return nil, auth.ErrNotFound("queue")
	}
	const unavailable = "the session could not be recorded; reconnect"
	store := m.tasks
	id, err := store.WorkerSessionOpen(c.Context(), &tasks.WorkerSessionOpenParams{
		QueueID: *body.QueueID, CredentialID: p.CredentialID, ApplicationID: p.ApplicationID, WorkerName: name, NodeID: m.nodeID,
		Capacity: *body.Capacity, MaxPerApplication: m.cfg.MaxConnectionsPerApp,
	})
	if errors.Is(err, tasks.ErrApplicationConnections) {
		return nil, httpx.Errorf(httpx.CodeCapacityExceeded,
			"the application has %d worker connections open across all nodes, its limit (workers.max_connections_per_app); retry later",
			m.cfg.MaxConnectionsPerApp)
	}
	if err != nil {
		c.Unavailable(f.MessageID, unavailable, "open worker session", err)
		return nil, nil
	}
	// Leases the worker still runs move to this session before the welcome,
	// so that its pings renew them and its dispatcher counts them.
	resumed := []string{}
	if len(resume) > 0 {
		adopted, err := store.WorkerSessionAdopt(c.Context(), id, resume, m.cfg.LeaseDuration)
		if err != nil {
			m.closeSession(id)
			c.Unavailable(f.MessageID, unavailable, "adopt resumed leases", err)
			return nil, nil
		}
		resumed = append(resumed, adopted...)
	}
	if err := c.Welcome(id, f, typeWelcome, welcomeBody{
		SessionID: id, QueueID: *body.QueueID, Capacity: *body.Capacity,
		LeaseDurationMS:     m.cfg.LeaseDuration.Milliseconds(),
		HeartbeatIntervalMS: m.cfg.HeartbeatInterval.Milliseconds(),
		ServerTime:          httpx.FormatTime(db.Now()),
		Resumed:             resumed,
	}); err != nil {
		// The connection ended before its welcome: the session never
		// started, so it is closed at once.
		m.closeSession(id)
		return nil, nil
	}
	return &session{m: m, c: c, id: id, queueID: *body.QueueID, authHeader: r.Header.Get("Authorization"),
		freed: make(chan struct{}, 1), completions: batch.NewWaiting(completionsPerConnection)}, nil
}

// closeSession marks a recorded session closed, within its own bounded
// context since the connection's has usually ended.
func (m *Module) closeSession(id string) {
	ctx, cancel := wsx.CleanupContext(context.Background())
	defer cancel()
	if err := m.tasks.WorkerSessionClose(ctx, id); err != nil {
		m.logger.Warn("close worker session", "session_id", id, "err", err)
	}
}

// session is one worker connection after its hello.
type session struct {
	m          *Module
	c          *wsx.Conn
	id         string
	queueID    string
	authHeader string
	// freed is signalled when a lease of this session ends, so the
	// dispatcher can lease again at once.
	freed chan struct{}
	// completions are the completions waiting for their batch's commit;
	// the handler ends after their answers.
	completions *batch.Waiting
	// completed counts the completions applied (first time), for the
	// session's close log line.
	completed atomic.Int64
}

// Counts returns the completions the session applied, for its close log
// line.
func (s *session) Counts() []slog.Attr {
	return []slog.Attr{slog.Int64("completed", s.completed.Load())}
}

// End waits for the answers of the completions still in a batch, then
// closes the session's record.
func (s *session) End() {
	s.completions.Wait()
	s.m.closeSession(s.id)
}

// Handle answers one client frame. It returns false when the connection is
// to close.
func (s *session) Handle(f *wsx.Frame) bool {
	switch f.Type {
	case typePing:
		return s.ping(f)
	case typeComplete:
		s.complete(f)
	case typeRelease:
		s.release(f)
	default:
		_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "unknown frame type for a worker: %q", f.Type))
	}
	return true
}

// ping renews the session's leases and re-checks the credential: a revoked
// credential or a lost queue grant ends the connection. Its body must be {}.
func (s *session) ping(f *wsx.Frame) bool {
	var body struct{}
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	ctx := s.c.Context()
	p, err := s.m.auth.Authenticate(ctx, s.authHeader)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		s.c.Fail(f.MessageID, err, wsx.ClosePolicyViolation, "credential revoked")
		return false
	case err != nil:
		s.c.Fail(f.MessageID, httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; reconnect"), wsx.CloseInternalError, "unavailable")
		return false
	case !p.Can(auth.PermTasksWork):
		s.c.Fail(f.MessageID, httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", auth.PermTasksWork), wsx.ClosePolicyViolation, "permission revoked")
		return false
	case !p.HasQueue(s.queueID):
		s.c.Fail(f.MessageID, auth.ErrNotFound("queue"), wsx.ClosePolicyViolation, "queue grant revoked")
		return false
	}
	if _, err := s.m.tasks.AttemptRenew(ctx, s.id, s.m.cfg.LeaseDuration); err != nil {
		s.c.Unavailable(f.MessageID, "leases could not be renewed; reconnect", "renew worker leases", err)
		return false
	}
	s.c.Reply(f, typeAck, pingAck{ServerTime: httpx.FormatTime(db.Now())})
	return true
}

// grant is what every lease and completion of the session checks again in
// its transaction: the credential still active, holding tasks:work and a
// grant on the session's queue.
func (s *session) grant() auth.Grant {
	return auth.Grant{
		CredentialID: s.c.Principal().CredentialID, Permission: auth.PermTasksWork,
		QueueID: s.queueID, What: "queue",
	}
}

// proof checks the lease proof of a complete or release body.
func (s *session) proof(b *proofBody) (tasks.Proof, error) {
	return checkProof(b, "body.", s.queueID)
}

// checkProof checks a lease proof whose members are at path (such as
// "body." or "body.resume.0.") and binds it to queueID.
func checkProof(b *proofBody, path, queueID string) (tasks.Proof, error) {
	if err := httpx.Required(
		httpx.Field{Path: path + "task_id", Present: b.TaskID != nil},
		httpx.Field{Path: path + "attempt_id", Present: b.AttemptID != nil},
		httpx.Field{Path: path + "epoch", Present: b.Epoch != nil},
		httpx.Field{Path: path + "lease_secret", Present: b.LeaseSecret != nil},
	); err != nil {
		return tasks.Proof{}, err
	}
	if !httpx.ValidID(*b.TaskID) || !httpx.ValidID(*b.AttemptID) {
		return tasks.Proof{}, httpx.Errorf(httpx.CodeInvalidArgument, "%stask_id and %sattempt_id must be 32 lowercase hex characters", path, path)
	}
	return tasks.Proof{
		TaskID: *b.TaskID, AttemptID: *b.AttemptID, Epoch: uint64(*b.Epoch),
		LeaseSecret: b.LeaseSecret.Encode(), QueueID: queueID,
	}, nil
}

// resumeProofs checks the resume of a hello: at most maxResume proofs, no
// more than the hello's capacity, each complete and well formed.
func resumeProofs(resume []proofBody, capacity int, queueID string) ([]tasks.Proof, error) {
	if len(resume) > maxResume {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "body.resume holds at most %d attempts", maxResume)
	}
	if len(resume) > capacity {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "body.resume holds more attempts than capacity")
	}
	out := make([]tasks.Proof, 0, len(resume))
	for i := range resume {
		p, err := checkProof(&resume[i], fmt.Sprintf("body.resume.%d.", i), queueID)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *session) complete(f *wsx.Frame) {
	var body completeBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return
	}
	proof, err := s.proof(&body.proofBody)
	if err == nil {
		err = httpx.Required(httpx.Field{Path: "body.outcome", Present: body.Outcome != nil})
	}
	if err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return
	}
	params := &tasks.AttemptCompleteParams{Proof: proof, Outcome: *body.Outcome}
	if !tasks.ValidOutcome(*body.Outcome) {
		_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "body.outcome must be succeeded, failed, needs_review or cancelled"))
		return
	}
	if body.Result != nil {
		if len(body.Result) > tasks.MaxInputBytes {
			_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "body.result exceeds %d bytes", tasks.MaxInputBytes))
			return
		}
		params.Result = body.Result
	}
	if body.Error != nil {
		if len(body.Error.Code) > 128 || len(body.Error.Message) > 1024 {
			_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "body.error.code is limited to 128 bytes and body.error.message to 1024"))
			return
		}
		params.ErrorCode, params.ErrorMessage = body.Error.Code, body.Error.Message
	}
	// The request loop goes on while the completion waits for its batch's
	// commit; the reply follows that commit.
	if !s.completions.Reserve(s.c.Context()) {
		return
	}
	params.Grant = s.grant()
	var received time.Time
	if s.m.tracer.Enabled() {
		received = time.Now()
	}
	s.m.completes.Submit(&completeRequest{Params: *params, Done: func(o tasks.CompleteOutcome, err error) {
		if err != nil {
			o.Err = err
		}
		if o.Err == nil && !o.Reply.Deduplicated {
			s.traceComplete(received, params, &o)
		}
		s.completions.Answer(func() {
			if auth.IsGrantError(o.Err) {
				// The credential lost what the completion needs: the
				// error answers it and the connection closes (seed 001
				// §1, §7, for workers as for consumers).
				s.c.Fail(f.MessageID, o.Err, wsx.ClosePolicyViolation, "completion refused")
				return
			}
			if o.Err != nil {
				s.sendStoreError(f, o.Err)
				return
			}
			if !o.Reply.Deduplicated {
				s.completed.Add(1)
				s.signalFreed()
			}
			s.c.Reply(f, typeAck, o.Reply)
		})
	}})
}

// traceComplete records the span of an applied task.complete, from the
// frame's arrival (received) to its batch's commit, as a child of the
// task's trace context. It does nothing when the node does not trace.
func (s *session) traceComplete(received time.Time, p *tasks.AttemptCompleteParams, o *tasks.CompleteOutcome) {
	if !s.m.tracer.Enabled() {
		return
	}
	_, span, _ := s.m.tracer.StartAt(s.c.Context(), spanComplete, trace.SpanKindServer, o.Trace, received)
	span.SetAttributes(tracing.AttrTaskID.String(p.TaskID), tracing.AttrQueueID.String(s.queueID),
		tracing.AttrAttemptID.String(p.AttemptID), tracing.AttrOutcome.String(p.Outcome), tracing.AttrSessionID.String(s.id))
	if o.Event != nil {
		span.SetAttributes(tracing.AttrEventID.String(o.Event.ID), tracing.AttrEventType.String(o.Event.Type),
			tracing.AttrEventSequence.Int64(int64(o.Event.Sequence)))
	}
	span.End()
}

func (s *session) release(f *wsx.Frame) {
	var body releaseBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return
	}
	proof, err := s.proof(&body.proofBody)
	if err == nil {
		err = httpx.Required(httpx.Field{Path: "body.reason", Present: body.Reason != nil})
	}
	if err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return
	}
	if len(*body.Reason) > 1024 {
		_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "body.reason is limited to 1024 bytes"))
		return
	}
	if _, err := s.m.tasks.AttemptRelease(s.c.Context(), &proof, *body.Reason); err != nil {
		s.sendStoreError(f, err)
		return
	}
	s.signalFreed()
	s.c.Reply(f, typeAck, releaseAck{TaskID: proof.TaskID, AttemptID: proof.AttemptID, Released: true})
}

// sendStoreError answers a failed store call: protocol errors (such as
// TASK_LEASE_LOST) as they are, anything else as UNAVAILABLE without
// closing, since the worker will retry the same proof.
func (s *session) sendStoreError(f *wsx.Frame, err error) {
	var he *httpx.Error
	if errors.As(err, &he) {
		_ = s.c.SendError(f.MessageID, he)
		return
	}
	s.c.Logger().Warn("worker request failed", "type", f.Type, "session_id", s.id, "err", err)
	_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; retry"))
}

func (s *session) signalFreed() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// Dispatch leases tasks for the session whenever it may have free capacity
// and sends task.assign for each persisted lease; it also forwards cancel
// requests as task.cancel, once per attempt. It returns when the connection
// ends.
func (s *session) Dispatch() {
	store := s.m.tasks
	ctx := s.c.Context()
	ticker := time.NewTicker(s.m.cfg.PollInterval)
	defer ticker.Stop()
	cancelSent := map[string]bool{}
	// Cancel requests are looked for when this node signals one and on
	// every poll (for those made on other nodes), not after every lease.
	checkCancels := true
	var cancels <-chan struct{}
	for ctx.Err() == nil {
		submitted, mine := store.Submitted(), store.SubmittedTo(s.queueID)
		// A slot freed before this lease is counted by it: the signal
		// would only wake a lease that finds the session full again.
		select {
		case <-s.freed:
		default:
		}
		select {
		case <-cancels:
			checkCancels = true
		default:
		}
		if checkCancels {
			// Taken before the look, so a request made during it wakes
			// the next one.
			cancels = store.CancelRequested()
		}
		assigned, full, err := store.AttemptLease(ctx, s.id, s.grant(), s.m.cfg.LeaseDuration)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, tasks.ErrSessionClosed) {
				// Another node took this one for dead and closed its
				// sessions (N-3): the worker reconnects at once and
				// resumes its leases on a new session.
				s.c.Logger().Warn("session closed by the cluster", "session_id", s.id)
				s.c.Close(wsx.CloseServiceRestart, "UNAVAILABLE: session closed because its node was taken for dead; reconnect")
				return
			}
			var he *httpx.Error
			if auth.IsGrantError(err) && errors.As(err, &he) {
				// The credential lost what leasing needs: nothing was
				// leased. Error frames of this protocol answer a request,
				// so the close reason says why.
				s.c.Close(wsx.ClosePolicyViolation, string(he.Code)+": "+he.Message)
				return
			}
			// A temporary failure inside the connection closes it, as a
			// failed claim closes an event connection (seed 001 §7). Error
			// frames of this protocol answer a request, so the close code
			// (1011) says it. The worker reconnects with backoff and
			// resumes the leases it still runs on the new connection.
			s.c.Logger().Warn("lease tasks", "session_id", s.id, "err", err)
			s.c.Close(wsx.CloseInternalError, "unavailable")
			return
		}
		for i := range assigned {
			if !s.sendAssign(&assigned[i]) {
				// The connection is closing: the rest are not sent either.
				for j := i + 1; j < len(assigned); j++ {
					s.leaseUnsent(&assigned[j], wsx.ErrClosed)
				}
				return
			}
		}
		if !checkCancels {
			// nothing asked for a look
		} else if requested, err := store.CancelRequestList(ctx, s.id); err == nil {
			checkCancels = false
			for _, p := range requested {
				if cancelSent[p.AttemptID] {
					continue
				}
				f, err := wsx.NewFrame(typeCancel, "", cancelBody{TaskID: p.TaskID, AttemptID: p.AttemptID})
				if err == nil && s.c.Send(f) == nil {
					cancelSent[p.AttemptID] = true
				}
			}
		}
		if len(assigned) > 0 && !full {
			continue // there may be more work and more capacity
		}
		if full {
			// Nothing can be leased until one of this session's leases
			// ends: a completion or release on this connection signals
			// freed, a lease that expires or is completed elsewhere is
			// found by the poll. Trying on every submission would only
			// find the session full again.
			submitted, mine = nil, nil
		}
		select {
		case <-ctx.Done():
		case <-submitted:
		case <-mine:
		case <-cancels:
			checkCancels = true
		case <-s.freed:
		case <-ticker.C:
			checkCancels = true
		}
	}
}

// sendAssign sends task.assign for a persisted lease. A lease whose frame
// is not written is given back at once (leaseUnsent). It returns false
// when the connection is closing.
func (s *session) sendAssign(a *tasks.Assignment) bool {
	_, span, traceCtx := s.m.tracer.Start(s.c.Context(), spanAssign, trace.SpanKindProducer, a.Task.Trace)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrTaskID.String(a.Task.ID), tracing.AttrQueueID.String(a.Task.QueueID),
			tracing.AttrAttemptID.String(a.AttemptID), tracing.AttrSessionID.String(s.id))
	}
	body := assignBody{
		Task: assignedTask{
			ID: a.Task.ID, QueueID: a.Task.QueueID, Revision: httpx.Uint64(a.Task.Revision),
			Input: jsontext.Value(a.Task.Input), Attempts: a.Task.Attempts, MaxAttempts: a.Task.MaxAttempts,
			Idempotent: a.Task.Idempotent,
		},
		AttemptID: a.AttemptID, Epoch: httpx.Uint64(a.Epoch),
		LeaseUntil: httpx.FormatTime(a.LeaseUntil), LeaseSecret: a.LeaseSecret, Trace: traceCtx.Ptr(),
	}
	return s.c.SendLease(typeAssign, body, func(err error) { s.leaseUnsent(a, err) })
}

// leaseUnsent releases the lease of a, whose task.assign was not sent
// (wsx.Conn.Unsent), so that the task neither holds the session's capacity
// until the lease expires nor counts an attempt with an uncertain effect
// that no worker ever saw.
func (s *session) leaseUnsent(a *tasks.Assignment, cause error) {
	s.c.Unsent(typeAssign, cause, func(ctx context.Context) error {
		if _, err := s.m.tasks.AttemptUnsent(ctx, a, wsx.UnsentDelay); err != nil {
			return err
		}
		s.signalFreed()
		return nil
	}, "task_id", a.Task.ID, "attempt_id", a.AttemptID)
}
