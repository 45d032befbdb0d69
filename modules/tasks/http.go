package tasks

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/idem"
	"github.com/orbitrun/orbit/internal/tracing"
)

// Limits of task requests.
const (
	MaxInputBytes      = 256 << 10
	DefaultMaxAttempts = 3
	maxMaxAttempts     = 100
	maxReasonChars     = 1024
)

func (m *Module) routes(r *mux.Router) {
	a := m.auth
	// A submission checks its grant again in its batch (recordSubmits), so
	// its caller may be answered from the node's recent authentications.
	r.Handle("/v1/tasks", auth.RequireCached(a, auth.PermTasksSubmit, http.HandlerFunc(m.submit))).Methods(http.MethodPost)
	r.Handle("/v1/tasks", auth.Require(a, auth.PermTasksRead, http.HandlerFunc(m.list))).Methods(http.MethodGet)
	r.Handle("/v1/tasks:batch", auth.Require(a, auth.PermTasksSubmit, http.HandlerFunc(m.submitBatch))).Methods(http.MethodPost)
	r.Handle("/v1/tasks/{id}", auth.Require(a, auth.PermTasksRead, http.HandlerFunc(m.get))).Methods(http.MethodGet)
	r.Handle("/v1/tasks/{id}:cancel", auth.Require(a, auth.PermTasksCancel, http.HandlerFunc(m.cancel))).Methods(http.MethodPost)
	r.Handle("/v1/tasks/{id}:review", auth.Require(a, auth.PermTasksReview, http.HandlerFunc(m.review))).Methods(http.MethodPost)
}

type submitRequest struct {
	QueueID     *string        `json:"queue_id"`
	Input       jsontext.Value `json:"input"`
	Idempotent  *bool          `json:"idempotent"`
	MaxAttempts *int           `json:"max_attempts"`
}

type taskReceipt struct {
	Task TaskView `json:"task"`
}

func (m *Module) submit(w http.ResponseWriter, r *http.Request) {
	// The task keeps the producer's trace context (O-5), or the context of
	// this request's span when the node traces: the worker's and the
	// consumers' spans become its descendants.
	ctx, span, traceCtx := m.tracer.Start(r.Context(), spanSubmit, trace.SpanKindServer, tracing.FromHeader(r.Header))
	defer span.End()
	if span.IsRecording() {
		r = r.WithContext(ctx)
	}
	var req submitRequest
	var created *Task
	var recheck *auth.Grant
	// A caller answered from the node's recent authentications is refused
	// only after its credential is read afresh: a revoked credential, or one
	// that lost the permission, gets that answer whatever else is wrong
	// with the request (C-1), and a queue granted since admits it.
	fresh := func() (*auth.Principal, error) {
		return auth.AuthorizeRequest(r.Context(), m.auth, r.Header, auth.PermTasksSubmit)
	}
	read := httpx.ReadJSON
	if auth.FromContext(r.Context()).Cached {
		read = func(r *http.Request, v any) ([]byte, error) {
			raw, err := httpx.ReadJSON(r, v)
			if err != nil {
				if _, refused := fresh(); refused != nil {
					return nil, refused
				}
			}
			return raw, err
		}
	}
	item, ok := idem.Prepare(w, r, &req, read, func(p *auth.Principal) (idem.Change, error) {
		params, err := req.check(p)
		if err == nil && p.Cached {
			// The key, which Prepare takes next, may be refused too.
			_, err = httpx.IdempotencyKey(r)
		}
		if err != nil && p.Cached {
			if p, err = fresh(); err != nil {
				return nil, err
			}
			params, err = req.check(p)
		}
		if err != nil {
			return nil, err
		}
		if p.Cached {
			recheck = &auth.Grant{CredentialID: p.CredentialID, Permission: auth.PermTasksSubmit, QueueID: params.QueueID, What: "queue"}
		}
		params.Trace = traceCtx
		return m.stageTask(params, func(t *Task) { created = t }), nil
	})
	if !ok {
		return
	}
	receipt, err := m.submitTogether(r.Context(), item, recheck)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if created != nil {
		// Committed: wake the queue's workers of this node now.
		m.store.submitted.Notify(created.QueueID)
		if span.IsRecording() {
			span.SetAttributes(tracing.AttrTaskID.String(created.ID), tracing.AttrQueueID.String(created.QueueID))
		}
	}
	httpx.WriteData(w, r, receipt.Status, receipt.Data)
}

// check checks a submission against the rules of POST /v1/tasks and the
// caller's grant on its queue, and returns the task to insert.
func (req *submitRequest) check(p *auth.Principal) (*TaskInsertParams, error) {
	if err := httpx.Required(
		httpx.Field{Path: "queue_id", Present: req.QueueID != nil},
		httpx.Field{Path: "input", Present: req.Input != nil},
	); err != nil {
		return nil, err
	}
	if !httpx.ValidID(*req.QueueID) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "queue_id must be 32 lowercase hex characters")
	}
	input := bytes.TrimSpace(req.Input)
	if len(input) > MaxInputBytes {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "input exceeds %d bytes", MaxInputBytes)
	}
	maxAttempts := DefaultMaxAttempts
	if req.MaxAttempts != nil {
		if *req.MaxAttempts < 1 || *req.MaxAttempts > maxMaxAttempts {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "max_attempts must be between 1 and %d", maxMaxAttempts)
		}
		maxAttempts = *req.MaxAttempts
	}
	if !p.HasQueue(*req.QueueID) {
		return nil, auth.ErrNotFound("queue")
	}
	return &TaskInsertParams{
		NamespaceID: p.NamespaceID, QueueID: *req.QueueID, CredentialID: p.CredentialID,
		Input: input, Idempotent: req.Idempotent != nil && *req.Idempotent, MaxAttempts: maxAttempts,
	}, nil
}

// loadVisible returns the task named in the path if the caller's grants
// cover its queue; otherwise 404, whether or not it exists (C-3).
func (m *Module) loadVisible(r *http.Request) (*Task, error) {
	id := mux.Vars(r)["id"]
	if !httpx.ValidID(id) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "task id must be 32 lowercase hex characters")
	}
	t, err := TaskGet(r.Context(), m.store.pool(), id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, auth.ErrNotFound("task")
	}
	if err != nil {
		return nil, err
	}
	p := auth.FromContext(r.Context())
	if t.NamespaceID != p.NamespaceID || !p.HasQueue(t.QueueID) {
		return nil, auth.ErrNotFound("task")
	}
	return t, nil
}

func (m *Module) get(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, nil, func(map[string]string) (TaskView, error) {
		t, err := m.loadVisible(r)
		if err != nil {
			return TaskView{}, err
		}
		if err := m.store.awaitSequenced(r.Context(), t.ID); err != nil {
			return TaskView{}, err
		}
		return t.view(true), nil
	})
}

func (m *Module) list(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.URL.Query()["older_than_ms"]; ok {
		m.listStuck(w, r)
		return
	}
	httpx.Read(w, r, []string{"queue_id", "state", "limit", "cursor"}, func(q map[string]string) (page httpx.Page[TaskView], err error) {
		queueID, limit, err := listArgs(r, q)
		if err != nil {
			return page, err
		}
		state := q["state"]
		p := auth.FromContext(r.Context())
		binding := "tasks|" + p.CredentialID + "|" + p.NamespaceID + "|queue=" + queueID + "|state=" + state
		after, err := httpx.CursorParam(q, binding)
		if err != nil {
			return page, err
		}
		rows, err := taskList(r.Context(), m.store.pool(), &taskListParams{QueueID: queueID, State: state, ListPage: httpx.ListPage{Limit: limit, After: after}})
		if err != nil {
			return page, err
		}
		ids := make([]string, len(rows))
		for i, t := range rows {
			ids[i] = t.ID
		}
		if err := m.store.awaitSequenced(r.Context(), ids...); err != nil {
			return page, err
		}
		return httpx.NewPage(rows, limit, binding,
			func(t *Task) (time.Time, string) { return t.CreatedAt, t.ID },
			func(t *Task) TaskView { return t.view(false) }), nil
	})
}

// listStuck is the list of tasks with older_than_ms: the stuck-work report
// (K-14), RUNNING tasks whose attempt began at least that long ago, with
// the worker session holding each.
func (m *Module) listStuck(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, []string{"queue_id", "state", "limit", "cursor", "older_than_ms"}, func(q map[string]string) (page httpx.Page[StuckTaskView], err error) {
		older, _, err := httpx.OlderThan(q, StateRunning)
		if err != nil {
			return page, err
		}
		queueID, limit, err := listArgs(r, q)
		if err != nil {
			return page, err
		}
		p := auth.FromContext(r.Context())
		binding := "tasks|" + p.CredentialID + "|" + p.NamespaceID + "|queue=" + queueID + "|state=" + StateRunning + "|older_than_ms=" + q["older_than_ms"]
		after, err := httpx.CursorParam(q, binding)
		if err != nil {
			return page, err
		}
		rows, err := taskListStuck(r.Context(), m.store.pool(), queueID, db.Now().Add(-older), httpx.ListPage{Limit: limit, After: after})
		if err != nil {
			return page, err
		}
		return httpx.NewPage(rows, limit, binding,
			func(t *stuckTask) (time.Time, string) { return t.CreatedAt, t.ID },
			func(t *stuckTask) StuckTaskView {
				return StuckTaskView{TaskView: t.view(false), LeaseSessionID: t.SessionID, LeasedAt: httpx.FormatTime(t.StartedAt)}
			}), nil
	})
}

// listArgs checks the queue, state and limit of a task list and the
// caller's grant on the queue.
func listArgs(r *http.Request, q map[string]string) (queueID string, limit int, err error) {
	queueID, ok := q["queue_id"]
	if !ok {
		return "", 0, httpx.Errorf(httpx.CodeInvalidArgument, "query parameter queue_id is required")
	}
	if !httpx.ValidID(queueID) {
		return "", 0, httpx.Errorf(httpx.CodeInvalidArgument, "queue_id must be 32 lowercase hex characters")
	}
	switch q["state"] {
	case "", StatePending, StateRunning, StateSucceeded, StateFailed, StateCancelled, StateNeedsReview:
	default:
		return "", 0, httpx.Errorf(httpx.CodeInvalidArgument, "state must be one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, NEEDS_REVIEW")
	}
	limit, err = httpx.Limit(q)
	if err != nil {
		return "", 0, err
	}
	if !auth.FromContext(r.Context()).HasQueue(queueID) {
		return "", 0, auth.ErrNotFound("queue")
	}
	return queueID, limit, nil
}

// cancelRequest is the body of a cancel, whose fields are all optional: an
// empty body reads as {} (idem.WriteOptional).
type cancelRequest struct {
	Reason *string `json:"reason"`
}

func (m *Module) cancel(w http.ResponseWriter, r *http.Request) {
	var req cancelRequest
	idem.WriteOptional(w, r, m.store.pool(), &req, func(p *auth.Principal) (idem.Change, error) {
		reason := ""
		if req.Reason != nil {
			reason = *req.Reason
			if utf8.RuneCountInString(reason) > maxReasonChars {
				return nil, httpx.Errorf(httpx.CodeInvalidArgument, "reason exceeds %d characters", maxReasonChars)
			}
		}
		t, err := m.loadVisible(r)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			after, ev, err := TaskCancel(ctx, tx, t.ID, reason)
			if err != nil {
				return 0, nil, err
			}
			db.OnCommit(tx, func() { m.store.metrics.appended(ev) })
			if err := m.audit.Audit(ctx, tx, audit.Record{
				NamespaceID: p.NamespaceID, CredentialID: p.CredentialID, Action: "task.cancel", SubjectID: t.ID, Reason: reason,
			}); err != nil {
				return 0, nil, err
			}
			return http.StatusOK, taskReceipt{Task: after.view(false)}, nil
		}, nil
	})
	// Write returns after the commit (and the sequencing of what it
	// appended): a RUNNING task may have got its cancel request.
	m.store.cancelRequested.Notify()
}

type reviewRequest struct {
	ExpectedRevision *httpx.Uint64  `json:"expected_revision"`
	Resolution       *string        `json:"resolution"`
	Reason           *string        `json:"reason"`
	Result           jsontext.Value `json:"result"`
}

func (m *Module) review(w http.ResponseWriter, r *http.Request) {
	var req reviewRequest
	idem.Write(w, r, m.store.pool(), &req, func(p *auth.Principal) (idem.Change, error) {
		if err := httpx.Required(
			httpx.Field{Path: "expected_revision", Present: req.ExpectedRevision != nil},
			httpx.Field{Path: "resolution", Present: req.Resolution != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		); err != nil {
			return nil, err
		}
		switch *req.Resolution {
		case resolutionRequeue, ResolutionSucceeded, resolutionFailed:
		default:
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "resolution must be requeue, succeeded or failed")
		}
		if n := utf8.RuneCountInString(*req.Reason); n == 0 || n > maxReasonChars {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "reason must be 1 to %d characters", maxReasonChars)
		}
		var result []byte
		if req.Result != nil {
			if *req.Resolution == resolutionRequeue {
				return nil, httpx.Errorf(httpx.CodeInvalidArgument, "result is not allowed with resolution requeue")
			}
			result = bytes.TrimSpace(req.Result)
			if len(result) > MaxInputBytes {
				return nil, httpx.Errorf(httpx.CodeInvalidArgument, "result exceeds %d bytes", MaxInputBytes)
			}
		}
		t, err := m.loadVisible(r)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			after, ev, err := TaskReview(ctx, tx, &TaskReviewParams{
				ID: t.ID, ExpectedRevision: uint64(*req.ExpectedRevision), Resolution: *req.Resolution,
				Reason: *req.Reason, Result: result,
			})
			if err != nil {
				return 0, nil, err
			}
			db.OnCommit(tx, func() { m.store.metrics.appended(ev) })
			if err := m.audit.Audit(ctx, tx, audit.Record{
				NamespaceID: p.NamespaceID, CredentialID: p.CredentialID, Action: "task.review." + *req.Resolution, SubjectID: t.ID, Reason: *req.Reason,
			}); err != nil {
				return 0, nil, err
			}
			return http.StatusOK, taskReceipt{Task: after.view(false)}, nil
		}, nil
	})
	// Write returns after the commit (and the sequencing of what it
	// appended): the review may have made the task PENDING again.
	m.store.submitted.NotifyAll()
}
