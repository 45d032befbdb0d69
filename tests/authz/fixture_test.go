package authz_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// waitTime bounds every wait for the server's background work.
const waitTime = 15 * time.Second

// owner is the first credential and its real resources: a subscription on
// its queue, a task that a worker completed, and the delivery of that
// task's task.succeeded event.
type owner struct {
	cred servertest.Credential
	// real is what the matrix asks other callers for.
	real target
	// inputMarker and resultMarker are in the task's input and result;
	// subscriptionName is the subscription's name.
	inputMarker, resultMarker, subscriptionName string
}

// newOwner creates the owner's credential, with every permission, and its
// resources. The result is real: an SDK worker leases the task and reports
// it succeeded, which appends task.succeeded to the queue's log, and the
// subscription, created before, gets its delivery.
func newOwner(t *testing.T, srv *servertest.Server) *owner {
	t.Helper()
	o := &owner{
		cred:         srv.Credential(t, servertest.CredentialParams{Permissions: auth.AllPermissions}),
		inputMarker:  "owner-input-" + marker(),
		resultMarker: "owner-result-" + marker(),
	}
	o.subscriptionName = "owner-sub-" + marker()
	o.real.Queue = o.cred.QueueID

	var sub struct {
		Subscription struct{ ID string } `json:"subscription"`
	}
	create(t, srv, o.cred, "owner-subscription", "/v1/subscriptions",
		fmt.Sprintf(`{"name":%q,"queue_id":%q}`, o.subscriptionName, o.real.Queue), &sub)
	o.real.Subscription = sub.Subscription.ID

	var task struct {
		Task struct{ ID string } `json:"task"`
	}
	create(t, srv, o.cred, "owner-task", "/v1/tasks",
		fmt.Sprintf(`{"queue_id":%q,"input":{"marker":%q}}`, o.real.Queue, o.inputMarker), &task)
	o.real.Task = task.Task.ID

	runWorker(t, srv, o.cred, json.RawMessage(fmt.Sprintf(`{"marker":%q}`, o.resultMarker)), func() bool {
		var got struct{ State string }
		read(t, srv, o.cred, "/v1/tasks/"+o.real.Task, &got)
		return got.State == "SUCCEEDED"
	})

	deadline := time.Now().Add(waitTime)
	for o.real.Delivery == "" {
		var page struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		read(t, srv, o.cred, "/v1/subscriptions/"+o.real.Subscription+"/deliveries", &page)
		if len(page.Items) > 0 {
			o.real.Delivery = page.Items[0].ID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery of the task's result within %s", waitTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var detail struct {
		Event struct {
			Type        string `json:"type"`
			AggregateID string `json:"aggregate_id"`
		} `json:"event"`
	}
	read(t, srv, o.cred, "/v1/subscriptions/"+o.real.Subscription+"/deliveries/"+o.real.Delivery, &detail)
	if detail.Event.Type != "task.succeeded" || detail.Event.AggregateID != o.real.Task {
		t.Fatalf("the owner's delivery is of %+v, want the task.succeeded of task %s", detail.Event, o.real.Task)
	}
	return o
}

// runWorker runs an SDK worker of cred on its queue, whose tasks succeed
// with result, until done reports true, and stops it.
func runWorker(t *testing.T, srv *servertest.Server, cred servertest.Credential, result json.RawMessage, done func() bool) {
	t.Helper()
	w, err := orbit.NewWorker(orbit.WorkerConfig{
		BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Capacity: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, func(context.Context, *orbit.AssignedTask) orbit.Outcome { return orbit.Succeeded(result) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("worker Run = %v", err)
			}
		case <-time.After(waitTime):
			t.Error("worker Run did not return")
		}
	}()
	deadline := time.Now().Add(waitTime)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not complete the task within %s", waitTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stranger is a credential of another scope with every permission and, when
// it has a queue, a subscription and a task of its own there, so that its
// lists are not empty and its own subscription can be combined with the
// owner's delivery.
func stranger(t *testing.T, srv *servertest.Server, p servertest.CredentialParams, ownTask bool) (servertest.Credential, target) {
	t.Helper()
	p.Permissions = auth.AllPermissions
	cred := srv.Credential(t, p)
	var own target
	if p.NoQueueGrant {
		return cred, own
	}
	own.Queue = cred.QueueID
	var sub struct {
		Subscription struct{ ID string } `json:"subscription"`
	}
	create(t, srv, cred, "own-subscription", "/v1/subscriptions", fmt.Sprintf(`{"name":"theirs-%s","queue_id":%q}`, marker(), own.Queue), &sub)
	own.Subscription = sub.Subscription.ID
	if ownTask {
		var task struct {
			Task struct{ ID string } `json:"task"`
		}
		create(t, srv, cred, "own-task", "/v1/tasks", fmt.Sprintf(`{"queue_id":%q,"input":{"theirs":true}}`, own.Queue), &task)
		own.Task = task.Task.ID
	}
	return cred, own
}

// create POSTs body to path as cred and decodes the receipt into dst.
func create(t *testing.T, srv *servertest.Server, cred servertest.Credential, key, path, body string, dst any) {
	t.Helper()
	resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: cred.Token, IdempotencyKey: key, Body: body})
	if resp.Status != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, resp.Status, resp.Body)
	}
	if err := json.Unmarshal(resp.Data, dst); err != nil {
		t.Fatalf("POST %s: %v: %s", path, err, resp.Data)
	}
}

// read GETs path as cred and decodes the data into dst.
func read(t *testing.T, srv *servertest.Server, cred servertest.Credential, path string, dst any) {
	t.Helper()
	resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path, Token: cred.Token})
	if resp.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.Status, resp.Body)
	}
	if err := json.Unmarshal(resp.Data, dst); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, resp.Data)
	}
}

// marker returns a random lowercase word that appears nowhere by chance.
func marker() string { return strings.ToLower(rand.Text())[:16] }

// randomTarget names resources that do not exist.
func randomTarget() target {
	id := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return fmt.Sprintf("%x", b)
	}
	return target{Queue: id(), Task: id(), Subscription: id(), Delivery: id()}
}

// secret is something of the owner's that a refusal must not carry.
type secret struct{ what, value string }

// ownerData returns the owner's data as it stands, read from the database:
// every ID and name of its resources, grouped by who may legitimately see
// them. owned is only the owner's (S-1); queued is shared with the
// credentials of the namespace that hold a grant on its queue (T-3).
func ownerData(t *testing.T, srv *servertest.Server, o *owner) (owned, queued []secret) {
	t.Helper()
	ids := func(what, query string, args ...any) []secret {
		rows, err := srv.DB.Query(query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []secret
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, secret{what, v})
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	owned = append(owned, secret{"credential id", o.cred.CredentialID}, secret{"subscription name", o.subscriptionName})
	owned = append(owned, ids("subscription id", `SELECT id FROM subscriptions WHERE credential_id = ?`, o.cred.CredentialID)...)
	owned = append(owned, ids("delivery id", `SELECT d.id FROM event_deliveries d JOIN subscriptions s ON s.id = d.subscription_id
		WHERE s.credential_id = ?`, o.cred.CredentialID)...)
	queued = append(queued, secret{"queue id", o.real.Queue}, secret{"task input", o.inputMarker}, secret{"task result", o.resultMarker})
	queued = append(queued, ids("task id", `SELECT id FROM tasks WHERE queue_id = ?`, o.real.Queue)...)
	queued = append(queued, ids("event id", `SELECT id FROM result_events WHERE queue_id = ?`, o.real.Queue)...)
	if !slices.ContainsFunc(owned, func(s secret) bool { return s.value == o.real.Delivery }) {
		t.Fatalf("the owner's delivery %s is not among its deliveries", o.real.Delivery)
	}
	return owned, queued
}

// adminRevoke revokes a credential as `orbit admin credential revoke` does.
func adminRevoke(srv *servertest.Server, credentialID string) error {
	return admin.NewStore(srv.DB).CredentialRevoke(context.Background(), credentialID, "authorization matrix")
}
