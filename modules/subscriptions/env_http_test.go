package subscriptions_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// docPath is the API document whose examples these tests produce.
const docPath = "../../docs/api/subscriptions.md"

// waitBound bounds every wait for the background materialiser or sweeper.
const waitBound = 15 * time.Second

// allPermissions lets a credential use every subscription endpoint and
// produce results through the tasks API.
var allPermissions = []string{
	auth.PermEventsRead, auth.PermEventsManage, auth.PermEventsConsume,
	auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel,
}

var (
	decimalPattern = regexp.MustCompile(`^"(0|[1-9][0-9]*)"$`)
	timePattern    = regexp.MustCompile(`^"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"$`)
	idPattern      = regexp.MustCompile(`^"[0-9a-f]{32}"$`)
)

// subscriptionMembers are exactly the members of the seed's subscription
// object (S-8), retry_policy (K-4), the progress of K-10 and the horizon of
// K-12.
var subscriptionMembers = []string{
	"id", "queue_id", "credential_id", "name", "revision", "enabled", "types",
	"cursor_sequence", "pending_count", "max_pending", "max_attempts", "created_at", "updated_at",
	"retry_policy", "blocked_reason", "lag", "oldest_pending_age_ms", "dead_letters", "redelivery_horizon",
}

// deliveryMembers are the members every EventDelivery has (S-18);
// lease_until and acknowledged_at come on top in LEASED and ACKED.
var deliveryMembers = []string{
	"id", "subscription_id", "event_id", "sequence", "revision", "state", "created_at",
	"available_at", "lease_epoch", "attempts", "attempt_budget",
}

// allTypes is the normalised type set of a subscription to every result.
var allTypes = []string{tasks.EventCancelled, tasks.EventFailed, tasks.EventNeedsReview, tasks.EventSucceeded}

// env is a real server on a fresh database. Its materialiser also polls
// every 50 ms, for results written straight into the log; its lease
// sweeper runs only when a test asks for it.
type env struct {
	srv   *servertest.Server
	mod   *subscriptions.Module
	tasks *tasks.Store
}

func start(t *testing.T, opts ...func(*subscriptions.Config)) *env {
	t.Helper()
	srv := servertest.Start(t, servertest.ModuleConfig("subscriptions", func(cfg *subscriptions.Config) {
		cfg.MaterializeInterval = 50 * time.Millisecond
		cfg.RecoverInterval = time.Hour
		for _, o := range opts {
			o(cfg)
		}
	}))
	return &env{
		srv:   srv,
		mod:   srv.Instances["subscriptions"].(*subscriptions.Module),
		tasks: srv.Instances["tasks"].(*tasks.Module).Store(),
	}
}

// cred returns a credential of namespace ns granted on queue, with perms or,
// when none are given, allPermissions.
func (e *env) cred(t *testing.T, ns, queue string, perms ...string) servertest.Credential {
	t.Helper()
	if len(perms) == 0 {
		perms = allPermissions
	}
	return e.srv.Credential(t, servertest.CredentialParams{Namespace: ns, Queue: queue, Permissions: perms})
}

// credOn returns a new credential of base's scope and permissions granted
// on base's queue and on the queues given.
func (e *env) credOn(t *testing.T, base servertest.Credential, queueIDs ...string) servertest.Credential {
	t.Helper()
	cred, token, err := admin.NewStore(e.srv.DB).CredentialCreate(context.Background(), &admin.CredentialCreateParams{
		NamespaceID: base.NamespaceID, ApplicationID: base.ApplicationID, EnvironmentID: base.EnvironmentID,
		Permissions: allPermissions, Queues: append([]string{base.QueueID}, queueIDs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Credential{Token: token, Scope: base.Scope, CredentialID: cred.ID}
}

// newKey returns a fresh Idempotency-Key.
func newKey() string { return "key-" + rand.Text() }

func (e *env) post(t *testing.T, c servertest.Credential, path, key, body string) *servertest.Response {
	t.Helper()
	return e.srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: c.Token, IdempotencyKey: key, Body: body})
}

func (e *env) get(t *testing.T, c servertest.Credential, path string) *servertest.Response {
	t.Helper()
	return e.srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path, Token: c.Token})
}

// createBody is a create request for name on queueID with extra members
// (each starting with a comma).
func createBody(queueID, name, extra string) string {
	return `{"name":"` + name + `","queue_id":"` + queueID + `"` + extra + `}`
}

// create creates a subscription with a fresh key and returns it.
func (e *env) create(t *testing.T, c servertest.Credential, body string) subscriptions.SubscriptionView {
	t.Helper()
	r := e.post(t, c, "/v1/subscriptions", newKey(), body)
	wantStatus(t, r, http.StatusCreated)
	return decodeReceipt(t, r).Subscription
}

func configureBody(revision uint64, enabled bool, reason string) string {
	return fmt.Sprintf(`{"expected_revision":"%d","enabled":%t,"reason":%q}`, revision, enabled, reason)
}

// configure sets enabled on a subscription at its current revision and
// returns the receipt's subscription.
func (e *env) configure(t *testing.T, c servertest.Credential, id string, enabled bool) subscriptions.SubscriptionView {
	t.Helper()
	cur := e.subscription(t, c, id)
	r := e.post(t, c, "/v1/subscriptions/"+id+":configure", newKey(), configureBody(uint64(cur.Revision), enabled, "test"))
	wantStatus(t, r, http.StatusOK)
	return decodeReceipt(t, r).Subscription
}

// subscription reads a subscription through GET.
func (e *env) subscription(t *testing.T, c servertest.Credential, id string) subscriptions.SubscriptionView {
	t.Helper()
	r := e.get(t, c, "/v1/subscriptions/"+id)
	wantStatus(t, r, http.StatusOK)
	return decodeSubscription(t, r.Data)
}

// deliveries returns every delivery of a subscription, newest first.
func (e *env) deliveries(t *testing.T, c servertest.Credential, id string) []subscriptions.DeliveryView {
	t.Helper()
	r := e.get(t, c, "/v1/subscriptions/"+id+"/deliveries?limit=100")
	wantStatus(t, r, http.StatusOK)
	p := decodeDeliveryPage(t, r)
	if p.NextCursor != "" {
		t.Fatalf("more than 100 deliveries: %s", r.Body)
	}
	return p.Items
}

// delivery reads one delivery through GET …/deliveries/{id}.
func (e *env) delivery(t *testing.T, c servertest.Credential, subID, id string) subscriptions.DeliveryView {
	t.Helper()
	r := e.get(t, c, "/v1/subscriptions/"+subID+"/deliveries/"+id)
	wantStatus(t, r, http.StatusOK)
	var d struct {
		Delivery subscriptions.DeliveryView `json:"delivery"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		t.Fatalf("delivery detail: %v: %s", err, r.Body)
	}
	return d.Delivery
}

// waitSubscription polls GET until cond holds, bounded by waitBound. It
// wakes when the module announces new deliveries, of any subscription or
// of this one, and otherwise every 10 ms (a cursor that moves over events
// of other types announces nothing).
func (e *env) waitSubscription(t *testing.T, c servertest.Credential, id, what string, cond func(subscriptions.SubscriptionView) bool) subscriptions.SubscriptionView {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		woken, mine := e.mod.Claimable(), e.mod.ClaimableFor(id)
		s := e.subscription(t, c, id)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, subscription %s is still not %s: %+v", waitBound, s.Name, what, s)
		}
		select {
		case <-woken:
		case <-mine:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitCursor waits until the materialiser has scanned a subscription up to
// cursor.
func (e *env) waitCursor(t *testing.T, c servertest.Credential, id string, cursor uint64) subscriptions.SubscriptionView {
	t.Helper()
	return e.waitSubscription(t, c, id, fmt.Sprintf("scanned to %d", cursor), func(s subscriptions.SubscriptionView) bool {
		return uint64(s.CursorSequence) == cursor
	})
}

// waitPending waits until a subscription's backlog holds n deliveries.
func (e *env) waitPending(t *testing.T, c servertest.Credential, id string, n int) subscriptions.SubscriptionView {
	t.Helper()
	return e.waitSubscription(t, c, id, fmt.Sprintf("at pending_count %d", n), func(s subscriptions.SubscriptionView) bool {
		return s.PendingCount == n
	})
}

// submit submits a task on c's queue and returns its ID.
func (e *env) submit(t *testing.T, c servertest.Credential, extra string) string {
	t.Helper()
	r := e.post(t, c, "/v1/tasks", newKey(), `{"queue_id":"`+c.QueueID+`","input":{"n":1}`+extra+`}`)
	wantStatus(t, r, http.StatusCreated)
	var rc struct {
		Task tasks.TaskView `json:"task"`
	}
	if err := json.Unmarshal(r.Data, &rc); err != nil {
		t.Fatal(err)
	}
	return rc.Task.ID
}

// cancelled submits a task on c's queue and cancels it over HTTP, which
// appends one task.cancelled event and wakes the materialiser. It returns
// the task ID.
func (e *env) cancelled(t *testing.T, c servertest.Credential) string {
	t.Helper()
	id := e.submit(t, c, "")
	wantStatus(t, e.post(t, c, "/v1/tasks/"+id+":cancel", newKey(), `{}`), http.StatusOK)
	return id
}

// cancelledN appends n task.cancelled events to c's queue.
func (e *env) cancelledN(t *testing.T, c servertest.Credential, n int) {
	t.Helper()
	for range n {
		e.cancelled(t, c)
	}
}

// completed submits a task on c's queue, leases it to a worker session and
// reports outcome, which appends task.succeeded, task.failed or
// task.needs_review. c's queue must have no other available task.
func (e *env) completed(t *testing.T, c servertest.Credential, outcome string) {
	t.Helper()
	id := e.submit(t, c, "")
	a, grant := e.leaseTask(t, c, id)
	p := &tasks.AttemptCompleteParams{
		Grant:   grant,
		Proof:   tasks.Proof{TaskID: id, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: outcome,
	}
	if outcome == tasks.OutcomeFailed {
		p.ErrorCode = "DECLINED"
	}
	if _, _, err := e.tasks.AttemptComplete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// requeued appends task.requeued (a worker releases a task) and then
// task.cancelled (the task is cancelled, so no task is left waiting).
func (e *env) requeued(t *testing.T, c servertest.Credential) {
	t.Helper()
	id := e.submit(t, c, "")
	a, _ := e.leaseTask(t, c, id)
	if _, err := e.tasks.AttemptRelease(context.Background(), &tasks.Proof{TaskID: id, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret}, "not started"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.post(t, c, "/v1/tasks/"+id+":cancel", newKey(), `{}`), http.StatusOK)
}

func (e *env) leaseTask(t *testing.T, c servertest.Credential, id string) (tasks.Assignment, auth.Grant) {
	t.Helper()
	ctx := context.Background()
	grant := e.srv.WorkerGrant(t, c)
	session, err := e.tasks.WorkerSessionOpen(ctx, &tasks.WorkerSessionOpenParams{QueueID: c.QueueID, CredentialID: grant.CredentialID, WorkerName: "test", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	assigned, _, err := e.tasks.AttemptLease(ctx, session, grant, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(assigned) != 1 || assigned[0].Task.ID != id {
		t.Fatalf("leased %d tasks, want exactly task %s", len(assigned), id)
	}
	return assigned[0], grant
}

// events returns the events of a queue's log, in sequence order.
func (e *env) events(t *testing.T, queueID string) []tasks.Event {
	t.Helper()
	evs, err := tasks.EventListAfter(context.Background(), e.srv.DB, queueID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// session opens an event connection of capacity n on a subscription.
func (e *env) session(t *testing.T, c servertest.Credential, subID string, n int) string {
	t.Helper()
	id, err := subscriptions.EventSessionOpen(context.Background(), e.srv.DB, nil, &subscriptions.EventSessionOpenParams{
		SubscriptionID: subID, CredentialID: c.CredentialID, Capacity: n,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// grant is what the event connection of session checks on every claim and
// ACK: its credential's consume grant on the subscription's queue.
func (e *env) grant(t *testing.T, session string) auth.Grant {
	t.Helper()
	g := auth.Grant{Permission: auth.PermEventsConsume, What: "subscription"}
	err := e.srv.DB.QueryRow(`SELECT es.credential_id, s.queue_id FROM event_sessions es
		JOIN subscriptions s ON s.id = es.subscription_id WHERE es.id = ?`, session).Scan(&g.CredentialID, &g.QueueID)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// claim leases what a session may take, for a minute.
func (e *env) claim(t *testing.T, session string) []subscriptions.Lease {
	t.Helper()
	leases, err := subscriptions.DeliveryClaim(context.Background(), e.srv.DB, e.tasks, e.srv.Authenticator(t), &subscriptions.DeliveryClaimParams{
		SessionID: session, Grant: e.grant(t, session), LeaseDuration: time.Minute, RecoverBatch: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	return leases
}

// claimOne opens a session of capacity 1 and leases one delivery.
func (e *env) claimOne(t *testing.T, c servertest.Credential, subID string) (string, subscriptions.Lease) {
	t.Helper()
	session := e.session(t, c, subID, 1)
	return session, e.claimNext(t, session)
}

// claimNext leases exactly one delivery to a session. A claim skips rows
// that another transaction has locked (SKIP LOCKED), for example the
// background sweeper's, so an empty claim is tried again, within waitBound.
func (e *env) claimNext(t *testing.T, session string) subscriptions.Lease {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		leases := e.claim(t, session)
		if len(leases) > 1 {
			t.Fatalf("leased %d deliveries, want one", len(leases))
		}
		if len(leases) == 1 {
			return leases[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("claimed nothing within %v, want one delivery", waitBound)
		}
		select {
		case <-e.mod.Claimable():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ack acknowledges a lease with its proof.
func (e *env) ack(t *testing.T, subID, session string, l subscriptions.Lease) subscriptions.AckResult {
	t.Helper()
	res, err := subscriptions.DeliveryAck(context.Background(), e.srv.DB, e.srv.Authenticator(t), &subscriptions.DeliveryAckParams{
		Grant: e.grant(t, session), SubscriptionID: subID, DeliveryID: l.Delivery.ID, Epoch: l.Delivery.LeaseEpoch, Secret: l.Secret, SessionID: session,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// expireLease moves a delivery's lease end into the past.
func (e *env) expireLease(t *testing.T, deliveryID string) {
	t.Helper()
	res, err := e.srv.DB.Exec(`UPDATE event_deliveries SET lease_until = ? WHERE id = ? AND state = 'LEASED'`, db.Now().Add(-time.Second), deliveryID)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("delivery %s is not LEASED", deliveryID)
	}
}

// recoverLeases runs lease recovery for one subscription, as a claim does.
func (e *env) recoverLeases(t *testing.T, subID string) int {
	t.Helper()
	n, err := subscriptions.DeliveryRecover(context.Background(), e.srv.DB, subID, 100)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// expired drives the only delivery of a new one-attempt subscription on c's
// queue to EXPIRED (materialised, leased, recovered: revision 3) and returns
// the subscription and the delivery.
func (e *env) expired(t *testing.T, c servertest.Credential, name string) (subscriptions.SubscriptionView, subscriptions.DeliveryView) {
	t.Helper()
	s := e.create(t, c, createBody(c.QueueID, name, `,"max_attempts":1`))
	e.cancelled(t, c)
	e.waitPending(t, c, s.ID, 1)
	_, l := e.claimOne(t, c, s.ID)
	e.expireLease(t, l.Delivery.ID)
	if n := e.recoverLeases(t, s.ID); n != 1 {
		t.Fatalf("recovered %d leases, want 1", n)
	}
	d := e.delivery(t, c, s.ID, l.Delivery.ID)
	if d.State != subscriptions.StateExpired || d.Revision != 3 {
		t.Fatalf("delivery is %s at revision %d, want EXPIRED at 3", d.State, d.Revision)
	}
	return s, d
}

type receipt struct {
	Subscription subscriptions.SubscriptionView `json:"subscription"`
	Deduplicated bool                           `json:"deduplicated"`
}

func decodeReceipt(t *testing.T, r *servertest.Response) receipt {
	t.Helper()
	var rc receipt
	if err := json.Unmarshal(r.Data, &rc); err != nil {
		t.Fatalf("receipt: %v: %s", err, r.Body)
	}
	return rc
}

func decodeSubscription(t *testing.T, raw json.RawMessage) subscriptions.SubscriptionView {
	t.Helper()
	var s subscriptions.SubscriptionView
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("subscription: %v: %s", err, raw)
	}
	return s
}

type subscriptionPage struct {
	Items      []subscriptions.SubscriptionView `json:"items"`
	NextCursor string                           `json:"next_cursor"`
}

func decodeSubscriptionPage(t *testing.T, r *servertest.Response) subscriptionPage {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	var p subscriptionPage
	if err := json.Unmarshal(r.Data, &p); err != nil || p.Items == nil {
		t.Fatalf("page: %v: %s", err, r.Body)
	}
	return p
}

type deliveryPage struct {
	Items      []subscriptions.DeliveryView `json:"items"`
	NextCursor string                       `json:"next_cursor"`
}

func decodeDeliveryPage(t *testing.T, r *servertest.Response) deliveryPage {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	var p deliveryPage
	if err := json.Unmarshal(r.Data, &p); err != nil || p.Items == nil {
		t.Fatalf("page: %v: %s", err, r.Body)
	}
	return p
}

// cursorPlaceholder replaces an opaque cursor, which changes with every run,
// by a placeholder of the same length for the document.
func cursorPlaceholder(body []byte, cursor string) []byte {
	return bytes.Replace(body, []byte(cursor), []byte("AQ"+strings.Repeat("A", len(cursor)-2)), 1)
}

// members returns the members of a JSON object as raw values.
func members(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	return m
}

// wantMembers checks that a JSON object has exactly the named members.
func wantMembers(t *testing.T, what string, raw json.RawMessage, want ...string) map[string]json.RawMessage {
	t.Helper()
	m := members(t, raw)
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s has members %v, want exactly %v", what, got, want)
	}
	return m
}

// wantJSON checks that raw is the same JSON value as want, member order aside.
func wantJSON(t *testing.T, what string, raw json.RawMessage, want string) {
	t.Helper()
	if !sameJSON(t, raw, []byte(want)) {
		t.Errorf("%s = %s, want %s", what, raw, want)
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(decodeAny(t, a), decodeAny(t, b))
}

// decodeAny decodes JSON keeping numbers as their text.
func decodeAny(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return v
}

func wantStatus(t *testing.T, r *servertest.Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
}

func wantError(t *testing.T, r *servertest.Response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code() != code {
		t.Fatalf("got %d %q, want %d %s: %s", r.Status, r.Code(), status, code, r.Body)
	}
}

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

// ids lists the IDs of deliveries.
func ids(ds []subscriptions.DeliveryView) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// sequences lists the sequences of deliveries in ascending order.
func sequences(ds []subscriptions.DeliveryView) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = uint64(d.Sequence)
	}
	slices.Sort(out)
	return out
}

// newestFirst reports whether items are ordered by created_at, then id,
// both descending.
func newestFirst(t *testing.T, createdAt func(i int) string, id func(i int) string, n int) bool {
	t.Helper()
	for i := 1; i < n; i++ {
		a, err1 := time.Parse(time.RFC3339Nano, createdAt(i-1))
		b, err2 := time.Parse(time.RFC3339Nano, createdAt(i))
		if err1 != nil || err2 != nil {
			t.Fatalf("created_at %q, %q: %v %v", createdAt(i-1), createdAt(i), err1, err2)
		}
		if a.Before(b) || (a.Equal(b) && id(i-1) <= id(i)) {
			return false
		}
	}
	return true
}
