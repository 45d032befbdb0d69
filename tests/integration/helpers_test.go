package integration_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/modules/admin"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
)

// testTimeout bounds one test; it only turns a hang into a failure.
const testTimeout = time.Minute

// leaseDuration is the lease the helper worker session takes.
const leaseDuration = 30 * time.Second

// fixture is one test's scope: a queue of its own on the platform and a
// consumer name of its own on the receiver.
type fixture struct {
	t            *testing.T
	ctx          context.Context
	namespaceID  string
	credentialID string
	queueID      string
	consumer     string
	tasks        *tasks.Store
}

// setup returns a fresh scope. Nothing else uses its queue or consumer name,
// so tests sharing the two databases do not see each other.
func setup(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	// The scope and the worker's credential are real: leases and
	// completions check the credential's grant on the queue.
	admins := admin.NewStore(env.platform)
	sc, err := admins.ScopeEnsure(ctx, &admin.ScopeEnsureParams{
		Namespace: "it", Application: "it", Environment: "it", Queue: "q-" + db.NewID(),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		t:           t,
		ctx:         ctx,
		namespaceID: sc.NamespaceID,
		queueID:     sc.QueueID,
		consumer:    newConsumer(),
		tasks:       tasks.NewStore(env.platform, admins, time.Second, time.Minute),
	}
	cred, _, err := admins.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "integration", Permissions: []string{auth.PermTasksWork}, Queues: []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.credentialID = cred.ID
	return f
}

// workOn points the fixture at another namespace's queue, with a new worker
// credential granted on it.
func (f *fixture) workOn(namespaceID, queueID string) {
	f.t.Helper()
	cred, _, err := admin.NewStore(env.platform).CredentialCreate(f.ctx, &admin.CredentialCreateParams{
		NamespaceID: namespaceID, ApplicationID: db.NewID(), EnvironmentID: db.NewID(),
		Label: "integration", Permissions: []string{auth.PermTasksWork}, Queues: []string{queueID},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.namespaceID, f.credentialID, f.queueID = namespaceID, cred.ID, queueID
}

// grant is what the fixture's worker sessions check on every lease and
// completion.
func (f *fixture) grant() auth.Grant {
	return auth.Grant{CredentialID: f.credentialID, Permission: auth.PermTasksWork, QueueID: f.queueID, What: "queue"}
}

// sub returns the fixture for a subtest: the same scope, reporting to t.
func (f *fixture) sub(t *testing.T) *fixture {
	c := *f
	c.t = t
	return &c
}

// newConsumer returns a consumer name (RECEIVER_NAME) no other test uses.
func newConsumer() string { return "it-" + db.NewID()[:16] }

// store returns an Inbox store of the test's consumer and queue on the
// shared receiver pool.
func (f *fixture) store() *inbox.Store {
	f.t.Helper()
	return f.storeFor(env.receiver, f.consumer, f.queueID)
}

// storeFor returns an Inbox store with the given identity on pool.
func (f *fixture) storeFor(pool *sql.DB, consumer, queueID string) *inbox.Store {
	f.t.Helper()
	s, err := inbox.NewStore(pool, consumer, queueID)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// apply applies raw and fails the test on an error.
func (f *fixture) apply(s *inbox.Store, raw []byte) inbox.Result {
	f.t.Helper()
	res, err := s.Apply(f.ctx, raw)
	if err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
	return res
}

// submit stores a new PENDING task in the test's queue.
func (f *fixture) submit() *tasks.Task {
	f.t.Helper()
	var task *tasks.Task
	err := db.Tx(f.ctx, env.platform, func(tx *sql.Tx) error {
		var err error
		task, err = tasks.TaskInsert(f.ctx, tx, &tasks.TaskInsertParams{
			NamespaceID: f.namespaceID, QueueID: f.queueID, CredentialID: f.credentialID,
			Input: []byte(`{"order":"A-1"}`), MaxAttempts: 1,
		})
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return task
}

// cancelled submits a task, cancels it while it waits and returns the
// task.cancelled event (revision 2, no result) as a subscriber receives it.
func (f *fixture) cancelled() (taskID string, raw []byte) {
	f.t.Helper()
	task := f.submit()
	var ev *tasks.Event
	err := db.Tx(f.ctx, env.platform, func(tx *sql.Tx) error {
		var err error
		_, ev, err = tasks.TaskCancel(f.ctx, tx, task.ID, "")
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if ev == nil || ev.Type != tasks.EventCancelled {
		f.t.Fatalf("cancel of a pending task appended %+v, want a task.cancelled event", ev)
	}
	return task.ID, f.eventJSON(ev.ID)
}

// completed submits a task, leases it to a worker session and completes it
// with outcome and result (nil: none). It returns the task and the result
// event (revision 3) as a subscriber receives it.
func (f *fixture) completed(outcome string, result []byte) (*tasks.Task, []byte) {
	f.t.Helper()
	task := f.submit()
	session, err := f.tasks.WorkerSessionOpen(f.ctx, &tasks.WorkerSessionOpenParams{
		QueueID: f.queueID, CredentialID: f.credentialID, WorkerName: "integration", Capacity: 1,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.tasks.WorkerSessionClose(f.ctx, session)
	leased, _, err := f.tasks.AttemptLease(f.ctx, session, f.grant(), leaseDuration)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(leased) != 1 || leased[0].Task.ID != task.ID {
		f.t.Fatalf("leased %d tasks, want exactly task %s", len(leased), task.ID)
	}
	a := leased[0]
	_, ev, err := f.tasks.AttemptComplete(f.ctx, &tasks.AttemptCompleteParams{
		Grant:   f.grant(),
		Proof:   tasks.Proof{TaskID: task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
		Outcome: outcome, Result: result,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if ev == nil {
		f.t.Fatalf("completion %s appended no event", outcome)
	}
	return f.taskGet(task.ID), f.eventJSON(ev.ID)
}

// reviewed resolves a NEEDS_REVIEW task as succeeded with result and returns
// the task.succeeded event (the task's next revision).
func (f *fixture) reviewed(task *tasks.Task, result []byte) []byte {
	f.t.Helper()
	var ev *tasks.Event
	err := db.Tx(f.ctx, env.platform, func(tx *sql.Tx) error {
		var err error
		_, ev, err = tasks.TaskReview(f.ctx, tx, &tasks.TaskReviewParams{
			ID: task.ID, ExpectedRevision: task.Revision, Resolution: tasks.ResolutionSucceeded,
			Reason: "checked by hand", Result: result,
		})
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.eventJSON(ev.ID)
}

func (f *fixture) taskGet(id string) *tasks.Task {
	f.t.Helper()
	task, err := tasks.TaskGet(f.ctx, env.platform, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return task
}

// eventJSON reads a committed event back from the result log the way the
// delivery path does and encodes it as a subscriber receives it.
func (f *fixture) eventJSON(eventID string) []byte {
	f.t.Helper()
	ev, err := tasks.EventGet(f.ctx, env.platform, f.queueID, eventID)
	if err != nil {
		f.t.Fatal(err)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		f.t.Fatal(err)
	}
	return raw
}

// edit returns raw with change applied to its decoded form; numbers keep
// their text.
func edit(t *testing.T, raw []byte, change func(ev map[string]any)) []byte {
	t.Helper()
	ev := decode(t, raw)
	change(ev)
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// snapshot returns the event's snapshot object for editing.
func snapshot(t *testing.T, ev map[string]any) map[string]any {
	t.Helper()
	s, ok := ev["snapshot"].(map[string]any)
	if !ok {
		t.Fatalf("event has no snapshot object: %v", ev)
	}
	return s
}

// inboxRow is a row of receiver_inbox.
type inboxRow struct {
	Digest     string
	EventJSON  string
	Applied    bool
	ReceivedAt time.Time
}

// inboxRows returns the committed Inbox rows of a scope by event id, read
// on the shared receiver pool (another connection than the store's).
func (f *fixture) inboxRows(consumer, queueID string) map[string]inboxRow {
	f.t.Helper()
	rows, err := env.receiver.QueryContext(f.ctx, `SELECT event_id, event_sha256, event_json, applied, received_at
		FROM receiver_inbox WHERE consumer_name = ? AND queue_id = ?`, consumer, queueID)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]inboxRow{}
	for rows.Next() {
		var id string
		var r inboxRow
		if err := rows.Scan(&id, &r.Digest, &r.EventJSON, &r.Applied, &r.ReceivedAt); err != nil {
			f.t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// view returns a task's view row in a scope, or nil when there is none.
func (f *fixture) view(consumer, queueID, taskID string) *inbox.View {
	f.t.Helper()
	v, err := f.storeFor(env.receiver, consumer, queueID).View(f.ctx, taskID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// rowCounts returns how many Inbox and view rows a consumer has, in every
// queue.
func (f *fixture) rowCounts(consumer string) (inboxRows, viewRows int) {
	f.t.Helper()
	err := env.receiver.QueryRowContext(f.ctx, `SELECT
		(SELECT COUNT(*) FROM receiver_inbox WHERE consumer_name = ?),
		(SELECT COUNT(*) FROM receiver_task_views WHERE consumer_name = ?)`, consumer, consumer).Scan(&inboxRows, &viewRows)
	if err != nil {
		f.t.Fatal(err)
	}
	return inboxRows, viewRows
}

// wantView checks a view row's version, last event, state and count.
func wantView(t *testing.T, v *inbox.View, revision uint64, eventID, state string, applied int) {
	t.Helper()
	if v == nil {
		t.Fatalf("no view row, want revision %d from event %s", revision, eventID)
	}
	if v.TaskRevision != revision || v.LastEventID != eventID || v.LastState != state || v.AppliedEvents != applied {
		t.Fatalf("view = revision %d, event %s, state %s, applied_events %d; want %d, %s, %s, %d",
			v.TaskRevision, v.LastEventID, v.LastState, v.AppliedEvents, revision, eventID, state, applied)
	}
}

// eventID returns the id of an event's JSON.
func eventID(t *testing.T, raw []byte) string {
	t.Helper()
	id, _ := decode(t, raw)["id"].(string)
	if id == "" {
		t.Fatalf("event without id: %s", raw)
	}
	return id
}
