package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// maxQueues bounds the queues the queues page lists (one API page).
const maxQueues = 100

// queueRow is one line of the queues page.
type queueRow struct {
	Queue  queue
	Counts *tasks.QueueCounts
	Oldest string
}

type queuesPage struct {
	Queues []queueRow
	// Counted is false when the credential lacks tasks:read: the counts
	// are the queue's tasks, which it may not read.
	Counted bool
}

func (queuesPage) title() string { return "Queues" }

// queueRows lists the credential's granted queues (GET /v1/queues) and,
// when it may read their tasks, each one's counts.
func (m *Module) queueRows(r *http.Request, s *session) (queuesPage, error) {
	var qs page[queue]
	if err := m.call(r, s, http.MethodGet, "/v1/queues?limit=100", nil, "", &qs); err != nil {
		return queuesPage{}, err
	}
	out := queuesPage{Counted: s.Can(auth.PermTasksRead)}
	now := db.Now()
	for _, q := range qs.Items[:min(len(qs.Items), maxQueues)] {
		row := queueRow{Queue: q}
		if out.Counted {
			c, err := m.tasks.QueueCounts(r.Context(), q.ID)
			if err != nil {
				return queuesPage{}, err
			}
			row.Counts = &c
			row.Oldest = "none pending"
			if c.OldestPending != nil {
				row.Oldest = age(max(0, now.Sub(*c.OldestPending)))
			}
		}
		out.Queues = append(out.Queues, row)
	}
	return out, nil
}

func (m *Module) queuesPage(w http.ResponseWriter, r *http.Request, s *session) {
	data, err := m.queueRows(r, s)
	if err != nil {
		m.fail(w, r, s, err)
		return
	}
	m.render(w, r, http.StatusOK, "queues", s, data)
}

// queuesLive is the queues page's counts as JSON, for the page's script:
// {"<queue id>": {"pending": "3", …}}.
func (m *Module) queuesLive(w http.ResponseWriter, r *http.Request, s *session) {
	data, err := m.queueRows(r, s)
	if err != nil {
		writeLive(w, apiStatus(err), nil)
		return
	}
	out := map[string]map[string]string{}
	for _, q := range data.Queues {
		if q.Counts == nil {
			continue
		}
		out[q.Queue.ID] = map[string]string{
			"pending": itoa(q.Counts.Pending), "running": itoa(q.Counts.Running),
			"needs_review": itoa(q.Counts.NeedsReview), "oldest_pending_age": q.Oldest,
		}
	}
	writeLive(w, http.StatusOK, out)
}

// writeLive writes a live fragment: JSON, never cached.
func writeLive(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiStatus is the HTTP status of an error (500 for anything but an API
// refusal).
func apiStatus(err error) int {
	if c := apiCode(err); c != "" {
		return c.Status()
	}
	return http.StatusInternalServerError
}

var taskStates = []string{"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW"}

type tasksPage struct {
	Queues  []queue
	QueueID string
	State   string
	States  []string
	Tasks   page[task]
	// Next is the query of the next page, when there is one.
	Next string
}

func (tasksPage) title() string { return "Tasks" }

// tasksPage lists a queue's tasks (GET /v1/tasks), filtered by state.
func (m *Module) tasksPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	data := tasksPage{QueueID: q.Get("queue_id"), State: q.Get("state"), States: taskStates}
	var qs page[queue]
	if err := m.call(r, s, http.MethodGet, "/v1/queues?limit=100", nil, "", &qs); err != nil {
		m.fail(w, r, s, err)
		return
	}
	data.Queues = qs.Items
	if data.QueueID == "" && len(qs.Items) > 0 {
		data.QueueID = qs.Items[0].ID
	}
	if data.QueueID != "" {
		api := url.Values{"queue_id": {data.QueueID}, "limit": {"50"}}
		if data.State != "" {
			api.Set("state", data.State)
		}
		if c := q.Get("cursor"); c != "" {
			api.Set("cursor", c)
		}
		if err := m.call(r, s, http.MethodGet, "/v1/tasks?"+api.Encode(), nil, "", &data.Tasks); err != nil {
			m.fail(w, r, s, err)
			return
		}
		if data.Tasks.NextCursor != "" {
			next := url.Values{"queue_id": {data.QueueID}, "cursor": {data.Tasks.NextCursor}}
			if data.State != "" {
				next.Set("state", data.State)
			}
			data.Next = next.Encode()
		}
	}
	m.render(w, r, http.StatusOK, "tasks", s, data)
}

type attemptRow struct {
	tasks.AttemptView
	Started, Ended string
}

type eventRow struct {
	event
	DetailsText string
}

type taskPage struct {
	Task        task
	Attempts    []attemptRow
	Events      []eventRow
	InputText   string
	ResultText  string
	CancelKey   string
	ReviewKey   string
	Resolutions []string
}

func (p taskPage) title() string { return "Task " + p.Task.ID }

// taskPage shows a task (GET /v1/tasks/{id}, which checks tasks:read and
// the queue grant) with its attempts and events.
func (m *Module) taskPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := mux.Vars(r)["id"]
	var t task
	if err := m.call(r, s, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, "", &t); err != nil {
		m.fail(w, r, s, err)
		return
	}
	attempts, events, err := m.tasks.TaskHistory(r.Context(), t.ID)
	if err != nil {
		m.fail(w, r, s, err)
		return
	}
	data := taskPage{Task: t, InputText: pretty(t.Input), ResultText: pretty(t.Result),
		CancelKey: randomHex(16), ReviewKey: randomHex(16), Resolutions: []string{"requeue", "succeeded", "failed"}}
	for _, a := range attempts {
		row := attemptRow{AttemptView: a, Started: httpx.FormatTime(a.StartedAt)}
		if a.EndedAt != nil {
			row.Ended = httpx.FormatTime(*a.EndedAt)
		}
		data.Attempts = append(data.Attempts, row)
	}
	for _, ev := range events {
		data.Events = append(data.Events, eventRow{event: event{
			ID: ev.ID, Sequence: strconv.FormatUint(uint64(ev.Sequence), 10), Type: ev.Type, OccurredAt: ev.OccurredAt,
		}, DetailsText: string(ev.Details)})
	}
	m.render(w, r, http.StatusOK, "task", s, data)
}

// formKey returns the form's Idempotency-Key: the one the page put in it,
// so that a form sent twice is one change (C-13).
func formKey(r *http.Request) string {
	if k := r.PostForm.Get("idempotency_key"); httpx.ValidIdempotencyKey(k) {
		return k
	}
	return randomHex(16)
}

// taskCancel sends POST /v1/tasks/{id}:cancel.
func (m *Module) taskCancel(w http.ResponseWriter, r *http.Request, s *session) {
	id := mux.Vars(r)["id"]
	body := map[string]any{}
	if reason := strings.TrimSpace(r.PostForm.Get("reason")); reason != "" {
		body["reason"] = reason
	}
	if err := m.call(r, s, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+":cancel", body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/console/tasks/"+url.PathEscape(id)+"?notice=cancelled", http.StatusSeeOther)
}

// taskReview sends POST /v1/tasks/{id}:review with the revision the page
// showed, so that a task changed meanwhile is refused (409).
func (m *Module) taskReview(w http.ResponseWriter, r *http.Request, s *session) {
	id := mux.Vars(r)["id"]
	f := r.PostForm
	body := map[string]any{
		"expected_revision": f.Get("expected_revision"), "resolution": f.Get("resolution"), "reason": f.Get("reason"),
	}
	if raw := strings.TrimSpace(f.Get("result")); raw != "" {
		if !json.Valid([]byte(raw)) {
			m.fail(w, r, s, httpx.Errorf(httpx.CodeInvalidArgument, "result must be JSON"))
			return
		}
		body["result"] = json.RawMessage(raw)
	}
	if err := m.call(r, s, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+":review", body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/console/tasks/"+url.PathEscape(id)+"?notice=reviewed", http.StatusSeeOther)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
