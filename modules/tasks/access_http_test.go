package tasks_test

import (
	"net/http"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// endpoint is one call of the tasks API on a given task and queue.
type endpoint struct {
	name, method, path, body string
}

func endpoints(queueID, taskID, revision string) []endpoint {
	return []endpoint{
		{"Submit", http.MethodPost, "/v1/tasks", submitBody(queueID, `{}`)},
		{"Get", http.MethodGet, "/v1/tasks/" + taskID, ""},
		{"List", http.MethodGet, "/v1/tasks?queue_id=" + queueID, ""},
		{"Cancel", http.MethodPost, "/v1/tasks/" + taskID + ":cancel", `{}`},
		{"Review", http.MethodPost, "/v1/tasks/" + taskID + ":review", `{"expected_revision":"` + revision + `","resolution":"requeue","reason":"checked"}`},
	}
}

func (e *env) call(t *testing.T, token string, ep endpoint) *servertest.Response {
	t.Helper()
	req := servertest.Request{Method: ep.method, Path: ep.path, Token: token, Body: ep.body}
	if ep.method == http.MethodPost {
		req.IdempotencyKey = newKey()
	}
	return e.srv.Do(t, req)
}

func TestC1_Unauthenticated(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "authn")
	task := e.needsReview(t, c, submitBody(c.QueueID, `{}`))
	for _, ep := range endpoints(c.QueueID, task.ID, "3") {
		t.Run(ep.name, func(t *testing.T) {
			for _, token := range []string{"", "orbit_unknown", "not a token"} {
				wantError(t, e.call(t, token, ep), http.StatusUnauthorized, "UNAUTHENTICATED")
			}
		})
	}
	t.Run("NothingChanged", func(t *testing.T) {
		wantState(t, e.task(t, c, task.ID), tasks.StateNeedsReview, 3)
	})
}

func TestC3_Permissions(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	const queue = "perms"
	owner := e.cred(t, queue)
	task := e.needsReview(t, owner, submitBody(owner.QueueID, `{}`))
	eps := endpoints(owner.QueueID, task.ID, "3")
	without := func(perm string) []string {
		var out []string
		for _, p := range append(allTaskPermissions, auth.PermTasksWork, auth.PermEventsRead) {
			if p != perm {
				out = append(out, p)
			}
		}
		return out
	}
	for _, tc := range []struct {
		ep      endpoint
		missing string
	}{
		{eps[0], auth.PermTasksSubmit},
		{eps[1], auth.PermTasksRead},
		{eps[2], auth.PermTasksRead},
		{eps[3], auth.PermTasksCancel},
		{eps[4], auth.PermTasksReview},
	} {
		t.Run(tc.ep.name+"Without"+tc.missing, func(t *testing.T) {
			c := e.cred(t, queue, without(tc.missing)...)
			wantError(t, e.call(t, c.Token, tc.ep), http.StatusForbidden, "PERMISSION_DENIED")
		})
	}
	t.Run("WorkerCredential", func(t *testing.T) {
		c := e.cred(t, queue, auth.PermTasksWork)
		for _, ep := range eps {
			wantError(t, e.call(t, c.Token, ep), http.StatusForbidden, "PERMISSION_DENIED")
		}
	})
	t.Run("NothingChanged", func(t *testing.T) {
		wantState(t, e.task(t, owner, task.ID), tasks.StateNeedsReview, 3)
		r := e.get(t, owner, "/v1/tasks?queue_id="+owner.QueueID)
		if len(decodePage(t, r).Items) != 1 {
			t.Fatalf("a denied submit created a task: %s", r.Body)
		}
	})
}

func TestT3_QueueGrants(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	owner := e.cred(t, "granted")
	task := e.needsReview(t, owner, submitBody(owner.QueueID, `{}`))
	unknownTask := "0123456789abcdef0123456789abcdef"
	unknownQueue := "fedcba9876543210fedcba9876543210"

	// notFound checks that every endpoint answers c with 404, and with the
	// same message as for a task and a queue that do not exist.
	notFound := func(t *testing.T, c servertest.Credential) {
		t.Helper()
		hidden := endpoints(owner.QueueID, task.ID, "3")
		missing := endpoints(unknownQueue, unknownTask, "3")
		for i, ep := range hidden {
			r := e.call(t, c.Token, ep)
			wantError(t, r, http.StatusNotFound, "NOT_FOUND")
			if m := e.call(t, c.Token, missing[i]); m.Error == nil || m.Error.Message != r.Error.Message {
				t.Errorf("%s: a hidden resource answers %q, a missing one %s: they must not differ", ep.name, r.Error.Message, m.Body)
			}
		}
	}
	t.Run("OtherQueue", func(t *testing.T) {
		notFound(t, e.cred(t, "other"))
	})
	t.Run("NoGrants", func(t *testing.T) {
		notFound(t, e.srv.Credential(t, servertest.CredentialParams{Queue: "granted", Permissions: allTaskPermissions, NoQueueGrant: true}))
	})
	t.Run("OtherNamespace", func(t *testing.T) {
		notFound(t, e.srv.Credential(t, servertest.CredentialParams{Namespace: "ns2", Queue: "granted", Permissions: allTaskPermissions}))
	})
	t.Run("OtherNamespaceWithAGrantRow", func(t *testing.T) {
		// The admin store refuses a grant across namespaces, and submit and
		// list rely on that; the endpoints that name a task also compare
		// its namespace, so the task stays invisible even to such a grant.
		c := e.srv.Credential(t, servertest.CredentialParams{Namespace: "ns3", Queue: "q", Permissions: allTaskPermissions})
		if _, err := e.srv.DB.Exec(`INSERT INTO credential_queue_grants (credential_id, queue_id) VALUES (?, ?)`, c.CredentialID, owner.QueueID); err != nil {
			t.Fatal(err)
		}
		for _, ep := range endpoints(owner.QueueID, task.ID, "3") {
			if ep.name == "Submit" || ep.name == "List" {
				continue
			}
			wantError(t, e.call(t, c.Token, ep), http.StatusNotFound, "NOT_FOUND")
		}
	})
	t.Run("NothingChanged", func(t *testing.T) {
		wantState(t, e.task(t, owner, task.ID), tasks.StateNeedsReview, 3)
		if n := len(decodePage(t, e.get(t, owner, "/v1/tasks?queue_id="+owner.QueueID)).Items); n != 1 {
			t.Fatalf("the owner's queue has %d tasks, want 1", n)
		}
	})
	t.Run("OwnerSeesIt", func(t *testing.T) {
		// Cancel conflicts because NEEDS_REVIEW is final; the review then
		// sends the task back to PENDING.
		want := []int{http.StatusCreated, http.StatusOK, http.StatusOK, http.StatusConflict, http.StatusOK}
		for i, ep := range endpoints(owner.QueueID, task.ID, "3") {
			if r := e.call(t, owner.Token, ep); r.Status != want[i] {
				t.Errorf("%s: owner got %d, want %d: %s", ep.name, r.Status, want[i], r.Body)
			}
		}
	})
}
