package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/httpx"
)

// subscriptionPath is the API path of the subscription in r's path.
func subscriptionPath(r *http.Request) string {
	return "/v1/subscriptions/" + url.PathEscape(mux.Vars(r)["id"])
}

// consolePath is the console page of the subscription in r's path.
func consolePath(r *http.Request) string {
	return "/console/subscriptions/" + url.PathEscape(mux.Vars(r)["id"])
}

type queueSubscriptions struct {
	Queue         queue
	Subscriptions []subscription
}

type subscriptionsPage struct{ Queues []queueSubscriptions }

func (subscriptionsPage) title() string { return "Subscriptions" }

// subscriptionsPage lists the credential's subscriptions on each of its
// queues (GET /v1/subscriptions?queue_id=…, which checks events:read).
func (m *Module) subscriptionsPage(w http.ResponseWriter, r *http.Request, s *session) {
	var qs page[queue]
	if err := m.call(r, s, http.MethodGet, "/v1/queues?limit=100", nil, "", &qs); err != nil {
		m.fail(w, r, s, err)
		return
	}
	var data subscriptionsPage
	for _, q := range qs.Items {
		var subs page[subscription]
		if err := m.call(r, s, http.MethodGet, "/v1/subscriptions?limit=100&queue_id="+url.QueryEscape(q.ID), nil, "", &subs); err != nil {
			m.fail(w, r, s, err)
			return
		}
		data.Queues = append(data.Queues, queueSubscriptions{Queue: q, Subscriptions: subs.Items})
	}
	m.render(w, r, http.StatusOK, "subscriptions", s, data)
}

type subscriptionPage struct {
	Sub         subscription
	Live        map[string]string
	DeadLetters []delivery
	MoreDead    bool
	Chart       chart
	Key         string
	Reasons     []string
}

func (p subscriptionPage) title() string { return "Subscription " + p.Sub.Name }

var expiredReasons = []string{"ATTEMPTS_EXHAUSTED", "REJECTED", "SKIPPED"}

// subscriptionPage shows a subscription (GET /v1/subscriptions/{id}: 404
// for one the credential does not own), its dead letters and its chart.
func (m *Module) subscriptionPage(w http.ResponseWriter, r *http.Request, s *session) {
	var sub subscription
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &sub); err != nil {
		m.fail(w, r, s, err)
		return
	}
	var dead page[delivery]
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r)+"/deliveries?state=EXPIRED&limit=20", nil, "", &dead); err != nil {
		m.fail(w, r, s, err)
		return
	}
	data := subscriptionPage{
		Sub: sub, Live: sub.live(), DeadLetters: dead.Items, MoreDead: dead.NextCursor != "",
		Chart: newChart(m.activity.DeliveryActivity(sub.ID)), Key: randomHex(16), Reasons: expiredReasons,
	}
	m.render(w, r, http.StatusOK, "subscription", s, data)
}

// subscriptionLive is the subscription page's figures as JSON.
func (m *Module) subscriptionLive(w http.ResponseWriter, r *http.Request, s *session) {
	var sub subscription
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &sub); err != nil {
		writeLive(w, apiStatus(err), nil)
		return
	}
	writeLive(w, http.StatusOK, sub.live())
}

func (m *Module) subscriptionPause(w http.ResponseWriter, r *http.Request, s *session) {
	m.configure(w, r, s, false)
}

func (m *Module) subscriptionResume(w http.ResponseWriter, r *http.Request, s *session) {
	m.configure(w, r, s, true)
}

// configure pauses or resumes with the revision the page showed
// (POST /v1/subscriptions/{id}:configure): a subscription changed since is
// refused with 409 and left as it is.
func (m *Module) configure(w http.ResponseWriter, r *http.Request, s *session, enabled bool) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = map[bool]string{false: "paused in the console", true: "resumed in the console"}[enabled]
	}
	body := map[string]any{"expected_revision": r.PostForm.Get("expected_revision"), "enabled": enabled, "reason": reason}
	if err := m.call(r, s, http.MethodPost, subscriptionPath(r)+":configure", body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, consolePath(r)+"?notice="+map[bool]string{false: "paused", true: "resumed"}[enabled], http.StatusSeeOther)
}

// confirmPage is the second step of a guarded change: what the dry run
// found, and the form that makes the change with that count.
type confirmPage struct {
	Sub subscription
	// Action is retry, replay or skip; Verb says it to people.
	Action, Verb string
	Matched      int
	Sample       []string
	// Fields are the form's fields, carried to the confirming POST.
	Fields []field
	Key    string
}

type field struct{ Name, Value string }

func (p confirmPage) title() string { return "Confirm: " + p.Verb }

// bulk runs a guarded bulk change in two steps (K-7, K-8): step dry_run
// counts what the form selects and shows the count; step confirm makes the
// change with that count as expected_count, which the API refuses with 409
// if the selection changed meanwhile.
func (m *Module) bulk(w http.ResponseWriter, r *http.Request, s *session, action, verb, apiPath string, body map[string]any, fields []field, notice string) {
	if r.PostForm.Get("step") != "confirm" {
		var sub subscription
		if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &sub); err != nil {
			m.fail(w, r, s, err)
			return
		}
		body["dry_run"] = true
		var count guardedCount
		if err := m.call(r, s, http.MethodPost, apiPath, body, randomHex(16), &count); err != nil {
			m.fail(w, r, s, err)
			return
		}
		m.render(w, r, http.StatusOK, "confirm", s, confirmPage{
			Sub: sub, Action: action, Verb: verb, Matched: count.Matched, Sample: count.Sample,
			Fields: append(fields, field{"expected_count", strconv.Itoa(count.Matched)}), Key: randomHex(16),
		})
		return
	}
	expected, err := strconv.Atoi(r.PostForm.Get("expected_count"))
	if err != nil {
		m.fail(w, r, s, httpx.Errorf(httpx.CodeInvalidArgument, "expected_count must be a number: count with a dry run first"))
		return
	}
	body["expected_count"] = expected
	if err := m.call(r, s, http.MethodPost, apiPath, body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, consolePath(r)+"?notice="+notice, http.StatusSeeOther)
}

// subscriptionRetry retries dead letters in bulk
// (POST /v1/subscriptions/{id}/deliveries:retry).
func (m *Module) subscriptionRetry(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	attempts, err := strconv.Atoi(strings.TrimSpace(f.Get("additional_attempts")))
	if err != nil {
		m.fail(w, r, s, httpx.Errorf(httpx.CodeInvalidArgument, "additional attempts must be a whole number"))
		return
	}
	filter := map[string]any{"state": "EXPIRED"}
	fields := []field{{"additional_attempts", f.Get("additional_attempts")}, {"reason", f.Get("reason")}}
	for _, name := range []string{"expired_reason", "from_sequence", "to_sequence"} {
		if v := strings.TrimSpace(f.Get(name)); v != "" {
			filter[name] = v
			fields = append(fields, field{name, v})
		}
	}
	body := map[string]any{"filter": filter, "additional_attempts": attempts, "reason": f.Get("reason")}
	m.bulk(w, r, s, "retry", "retry dead letters", subscriptionPath(r)+"/deliveries:retry", body, fields, "retried")
}

// subscriptionReplay replays acknowledged events
// (POST /v1/subscriptions/{id}:replay).
func (m *Module) subscriptionReplay(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	body := map[string]any{"from_sequence": strings.TrimSpace(f.Get("from_sequence")), "to_sequence": strings.TrimSpace(f.Get("to_sequence")), "reason": f.Get("reason")}
	fields := []field{{"from_sequence", f.Get("from_sequence")}, {"to_sequence", f.Get("to_sequence")}, {"reason", f.Get("reason")}}
	m.bulk(w, r, s, "replay", "replay acknowledged events", subscriptionPath(r)+":replay", body, fields, "replayed")
}

// skipPage is the dry run of a skip, which the API does not count: the
// subscription as it is now, whose revision the confirming POST expects.
type skipPage struct {
	Sub            subscription
	ToSequence     string
	Reason         string
	Key            string
	PendingCount   int
	CursorSequence string
}

func (p skipPage) title() string { return "Confirm: skip ahead" }

// subscriptionSkip moves the cursor forward (POST /v1/subscriptions/{id}:skip)
// in two steps: the first shows the subscription's cursor, lag and
// backlog now; the second skips with the revision it showed, so that a
// subscription changed meanwhile is refused with 409.
func (m *Module) subscriptionSkip(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	to := strings.TrimSpace(f.Get("to_sequence"))
	if to == "" {
		to = "head"
	}
	if f.Get("step") != "confirm" {
		var sub subscription
		if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &sub); err != nil {
			m.fail(w, r, s, err)
			return
		}
		m.render(w, r, http.StatusOK, "skip", s, skipPage{Sub: sub, ToSequence: to, Reason: f.Get("reason"), Key: randomHex(16)})
		return
	}
	body := map[string]any{"to_sequence": to, "expected_revision": f.Get("expected_revision"), "reason": f.Get("reason")}
	if err := m.call(r, s, http.MethodPost, subscriptionPath(r)+":skip", body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, consolePath(r)+"?notice=skipped", http.StatusSeeOther)
}

type deliveriesPage struct {
	Sub           subscription
	State, Reason string
	States        []string
	Reasons       []string
	Deliveries    page[delivery]
	Next          string
}

func (p deliveriesPage) title() string { return "Deliveries of " + p.Sub.Name }

// deliveriesPage lists deliveries with state and reason filters
// (GET /v1/subscriptions/{id}/deliveries).
func (m *Module) deliveriesPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	data := deliveriesPage{State: q.Get("state"), Reason: q.Get("expired_reason"),
		States: []string{"PENDING", "LEASED", "ACKED", "EXPIRED"}, Reasons: expiredReasons}
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &data.Sub); err != nil {
		m.fail(w, r, s, err)
		return
	}
	api := url.Values{"limit": {"50"}}
	if data.State != "" {
		api.Set("state", data.State)
	}
	if data.Reason != "" {
		api.Set("expired_reason", data.Reason)
	}
	if c := q.Get("cursor"); c != "" {
		api.Set("cursor", c)
	}
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r)+"/deliveries?"+api.Encode(), nil, "", &data.Deliveries); err != nil {
		m.fail(w, r, s, err)
		return
	}
	if data.Deliveries.NextCursor != "" {
		api.Set("cursor", data.Deliveries.NextCursor)
		api.Del("limit")
		data.Next = api.Encode()
	}
	m.render(w, r, http.StatusOK, "deliveries", s, data)
}

type deliveryPage struct {
	Sub          subscription
	Delivery     delivery
	Event        event
	DetailsText  string
	SnapshotText string
	Key          string
}

func (p deliveryPage) title() string { return "Delivery " + p.Delivery.ID }

// deliveryPage shows a delivery with its event
// (GET /v1/subscriptions/{id}/deliveries/{delivery_id}).
func (m *Module) deliveryPage(w http.ResponseWriter, r *http.Request, s *session) {
	var data deliveryPage
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r), nil, "", &data.Sub); err != nil {
		m.fail(w, r, s, err)
		return
	}
	var got struct {
		Delivery delivery `json:"delivery"`
		Event    event    `json:"event"`
	}
	if err := m.call(r, s, http.MethodGet, subscriptionPath(r)+"/deliveries/"+url.PathEscape(mux.Vars(r)["delivery_id"]), nil, "", &got); err != nil {
		m.fail(w, r, s, err)
		return
	}
	data.Delivery, data.Event, data.Key = got.Delivery, got.Event, randomHex(16)
	data.DetailsText, data.SnapshotText = pretty(got.Event.Details), pretty(got.Event.Snapshot)
	m.render(w, r, http.StatusOK, "delivery", s, data)
}

// deliveryRetry retries one dead letter
// (POST /v1/subscriptions/{id}/deliveries/{delivery_id}:retry) with the
// revision the page showed.
func (m *Module) deliveryRetry(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	attempts, err := strconv.Atoi(strings.TrimSpace(f.Get("additional_attempts")))
	if err != nil {
		m.fail(w, r, s, httpx.Errorf(httpx.CodeInvalidArgument, "additional attempts must be a whole number"))
		return
	}
	did := url.PathEscape(mux.Vars(r)["delivery_id"])
	body := map[string]any{"expected_revision": f.Get("expected_revision"), "additional_attempts": attempts, "reason": f.Get("reason")}
	if err := m.call(r, s, http.MethodPost, subscriptionPath(r)+"/deliveries/"+did+":retry", body, formKey(r), nil); err != nil {
		m.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, consolePath(r)+"/deliveries/"+did+"?notice=delivery", http.StatusSeeOther)
}
