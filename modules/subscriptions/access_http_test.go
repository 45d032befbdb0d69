package subscriptions_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/subscriptions"
)

// endpoint is one call of the subscription API.
type endpoint struct {
	name, method, path, body string
}

// endpoints are the calls on one subscription and one of its deliveries,
// valid for their owner.
func endpoints(queueID, subID, deliveryID string) []endpoint {
	d := "/v1/subscriptions/" + subID + "/deliveries"
	return []endpoint{
		{"Create", http.MethodPost, "/v1/subscriptions", createBody(queueID, "fresh-"+subID[:8], "")},
		{"List", http.MethodGet, "/v1/subscriptions?queue_id=" + queueID, ""},
		{"Get", http.MethodGet, "/v1/subscriptions/" + subID, ""},
		{"Configure", http.MethodPost, "/v1/subscriptions/" + subID + ":configure", configureBody(1, false, "maintenance")},
		{"Deliveries", http.MethodGet, d, ""},
		{"Delivery", http.MethodGet, d + "/" + deliveryID, ""},
		{"Retry", http.MethodPost, d + "/" + deliveryID + ":retry", `{"expected_revision":"3","reason":"repaired","additional_attempts":1}`},
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

// wantUntouched checks that the subscription made by expired and its
// delivery are as they were: nothing a refused request did changed them.
func (e *env) wantUntouched(t *testing.T, owner servertest.Credential, subID, deliveryID string) {
	t.Helper()
	s := e.subscription(t, owner, subID)
	if s.Revision != 1 || !s.Enabled {
		t.Errorf("subscription at revision %d, enabled %t; want 1, true", s.Revision, s.Enabled)
	}
	if d := e.delivery(t, owner, subID, deliveryID); d.State != subscriptions.StateExpired || d.Revision != 3 || d.AttemptBudget != 1 {
		t.Errorf("delivery %s at revision %d with budget %d; want EXPIRED at 3 with 1", d.State, d.Revision, d.AttemptBudget)
	}
	p := decodeSubscriptionPage(t, e.get(t, owner, "/v1/subscriptions?queue_id="+owner.QueueID))
	var n int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscriptions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || n != 1 {
		t.Errorf("%d subscriptions listed, %d stored; want only the owner's one", len(p.Items), n)
	}
}

func TestS1_OnlyTheOwningCredentialSeesASubscription(t *testing.T) {
	t.Parallel()
	e := start(t)
	owner := e.cred(t, "ns", "owned")
	s, d := e.expired(t, owner, "owned")
	const unknown = "0123456789abcdef0123456789abcdef"
	hidden := endpoints(owner.QueueID, s.ID, d.ID)
	missing := endpoints(owner.QueueID, unknown, unknown)

	// notFound checks that every call on the subscription answers c with
	// 404, the same answer as for a subscription that does not exist.
	notFound := func(t *testing.T, c servertest.Credential) {
		t.Helper()
		for i, ep := range hidden {
			if ep.name == "Create" || ep.name == "List" {
				continue
			}
			r := e.call(t, c.Token, ep)
			wantError(t, r, http.StatusNotFound, "NOT_FOUND")
			if m := e.call(t, c.Token, missing[i]); m.Code() != "NOT_FOUND" || m.Error.Message != r.Error.Message {
				t.Errorf("%s: a hidden subscription answers %q, a missing one %s: they must not differ", ep.name, r.Error.Message, m.Body)
			}
		}
	}

	t.Run("SameNamespaceSameQueue", func(t *testing.T) {
		other := e.cred(t, "ns", "owned")
		notFound(t, other)
		t.Run("ListShowsOnlyItsOwn", func(t *testing.T) {
			p := decodeSubscriptionPage(t, e.get(t, other, "/v1/subscriptions?queue_id="+owner.QueueID))
			if len(p.Items) != 0 {
				t.Fatalf("another credential lists %d subscriptions, want none: %+v", len(p.Items), p.Items)
			}
		})
	})
	t.Run("NoQueueGrant", func(t *testing.T) {
		c := e.srv.Credential(t, servertest.CredentialParams{Namespace: "ns", Queue: "owned", Permissions: allPermissions, NoQueueGrant: true})
		notFound(t, c)
		wantError(t, e.call(t, c.Token, hidden[0]), http.StatusNotFound, "NOT_FOUND")
		wantError(t, e.call(t, c.Token, hidden[1]), http.StatusNotFound, "NOT_FOUND")
	})
	t.Run("OtherNamespace", func(t *testing.T) {
		c := e.cred(t, "elsewhere", "owned")
		notFound(t, c)
		wantError(t, e.call(t, c.Token, hidden[0]), http.StatusNotFound, "NOT_FOUND")
		r := e.call(t, c.Token, hidden[1])
		wantError(t, r, http.StatusNotFound, "NOT_FOUND")
	})
	t.Run("DocumentedAnswer", func(t *testing.T) {
		r := e.call(t, e.cred(t, "ns", "owned").Token, hidden[2])
		wantError(t, r, http.StatusNotFound, "NOT_FOUND")
		doctest.Check(t, docPath, "subscriptions-not-found-response", r.Body)
	})
	t.Run("NothingChanged", func(t *testing.T) {
		e.wantUntouched(t, owner, s.ID, d.ID)
	})
}

func TestS2_BootstrapGrantsEventPermissionsOnlyWithEventAccess(t *testing.T) {
	t.Parallel()
	e := start(t)
	bootstrap := func(t *testing.T, eventAccess bool) servertest.Credential {
		t.Helper()
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := admin.Bootstrap(context.Background(), admin.NewStore(e.srv.DB), &admin.BootstrapParams{
			Namespace: "ns", Application: "app", Environment: "env", Queue: "boot",
			EventAccess: eventAccess, Output: filepath.Join(dir, "credentials.json"),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{auth.PermEventsRead, auth.PermEventsManage, auth.PermEventsConsume} {
			if slices.Contains(f.Permissions, p) != eventAccess {
				t.Errorf("--event-access=%t: permissions %v", eventAccess, f.Permissions)
			}
		}
		return servertest.Credential{Token: f.Token, CredentialID: f.CredentialID}
	}
	with := bootstrap(t, true)
	without := bootstrap(t, false)
	with.QueueID = e.cred(t, "ns", "boot").QueueID
	s, d := e.expired(t, with, "bootstrapped")
	eps := endpoints(with.QueueID, s.ID, d.ID)

	t.Run("WithoutEventAccess", func(t *testing.T) {
		for _, ep := range eps {
			wantError(t, e.call(t, without.Token, ep), http.StatusForbidden, "PERMISSION_DENIED")
		}
	})
	t.Run("WithEventAccess", func(t *testing.T) {
		for _, ep := range eps {
			if r := e.call(t, with.Token, ep); r.Status >= 300 {
				t.Errorf("%s: %d %s", ep.name, r.Status, r.Body)
			}
		}
	})
}

func TestC3_EventPermissions(t *testing.T) {
	t.Parallel()
	e := start(t)
	owner := e.cred(t, "ns", "perms")
	s, d := e.expired(t, owner, "guarded")
	eps := endpoints(owner.QueueID, s.ID, d.ID)
	without := func(perm string) []string {
		var out []string
		for _, p := range auth.AllPermissions {
			if p != perm {
				out = append(out, p)
			}
		}
		return out
	}
	t.Run("Denied", func(t *testing.T) {
		for _, tc := range []struct {
			ep      endpoint
			missing string
		}{
			{eps[0], auth.PermEventsManage},
			{eps[1], auth.PermEventsRead},
			{eps[2], auth.PermEventsRead},
			{eps[3], auth.PermEventsManage},
			{eps[4], auth.PermEventsRead},
			{eps[5], auth.PermEventsRead},
			{eps[6], auth.PermEventsManage},
		} {
			t.Run(tc.ep.name+"Without"+tc.missing, func(t *testing.T) {
				t.Parallel()
				c := e.cred(t, "ns", "perms", without(tc.missing)...)
				r := e.call(t, c.Token, tc.ep)
				wantError(t, r, http.StatusForbidden, "PERMISSION_DENIED")
				if tc.ep.name == "Configure" {
					doctest.Check(t, docPath, "subscriptions-permission-denied-response", r.Body)
				}
			})
		}
		for _, tc := range []struct {
			name  string
			perms []string
		}{
			{"ConsumeOnly", []string{auth.PermEventsConsume}},
			{"TasksOnly", []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel, auth.PermTasksReview, auth.PermTasksWork}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := e.cred(t, "ns", "perms", tc.perms...)
				for _, ep := range eps {
					wantError(t, e.call(t, c.Token, ep), http.StatusForbidden, "PERMISSION_DENIED")
				}
			})
		}
		t.Run("Unauthenticated", func(t *testing.T) {
			t.Parallel()
			for _, ep := range eps {
				for _, token := range []string{"", "orbit_unknown"} {
					wantError(t, e.call(t, token, ep), http.StatusUnauthorized, "UNAUTHENTICATED")
				}
			}
		})
	})
	t.Run("NothingChanged", func(t *testing.T) {
		e.wantUntouched(t, owner, s.ID, d.ID)
	})
}

func TestS3_QueryParametersAndNoOtherOperations(t *testing.T) {
	t.Parallel()
	e := start(t)
	owner := e.cred(t, "ns", "query")
	s, d := e.expired(t, owner, "queried")
	eps := endpoints(owner.QueueID, s.ID, d.ID)
	q := owner.QueueID

	t.Run("NoneOnSingleResourcesAndWrites", func(t *testing.T) {
		for _, ep := range []endpoint{eps[0], eps[2], eps[3], eps[5], eps[6]} {
			for _, query := range []string{"?x=1", "?queue_id=" + q, "?limit=1", "?cursor=abc", "?state=PENDING"} {
				ep := ep
				ep.path += query
				wantError(t, e.call(t, owner.Token, ep), http.StatusBadRequest, "INVALID_ARGUMENT")
			}
		}
	})
	t.Run("ListSubscriptions", func(t *testing.T) {
		base := "/v1/subscriptions?queue_id=" + q
		for _, path := range []string{
			base + "&x=1", base + "&state=PENDING", base + "&queue_id=" + q, base + "&limit=1&limit=2",
			base + "&cursor=", base + "&limit=", "/v1/subscriptions?queue_id=",
		} {
			wantError(t, e.get(t, owner, path), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("ListDeliveries", func(t *testing.T) {
		base := eps[4].path
		for _, path := range []string{
			base + "?x=1", base + "?queue_id=" + q, base + "?state=PENDING&state=ACKED", base + "?limit=1&limit=1",
			base + "?state=", base + "?cursor=",
		} {
			wantError(t, e.get(t, owner, path), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("NoDeleteOrReplace", func(t *testing.T) {
		for _, m := range []string{http.MethodDelete, http.MethodPut, http.MethodPatch} {
			for _, path := range []string{"/v1/subscriptions/" + s.ID, eps[5].path} {
				if m == http.MethodDelete && path == "/v1/subscriptions/"+s.ID {
					continue // K-11 deletes a subscription
				}
				r := e.srv.Do(t, servertest.Request{Method: m, Path: path, Token: owner.Token, Body: `{}`, IdempotencyKey: newKey()})
				wantError(t, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
			}
		}
	})
	t.Run("ConfigureChangesNothingButEnabled", func(t *testing.T) {
		for _, extra := range []string{
			`"types":["task.failed"]`, `"from_sequence":"0"`, `"cursor_sequence":"0"`, `"queue_id":"` + q + `"`,
			`"credential_id":"` + owner.CredentialID + `"`, `"name":"renamed"`, `"max_pending":5`, `"max_attempts":5`,
		} {
			body := `{"expected_revision":"1","enabled":true,"reason":"change",` + extra + `}`
			wantError(t, e.post(t, owner, "/v1/subscriptions/"+s.ID+":configure", newKey(), body), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("NoSelfNamedScope", func(t *testing.T) {
		for _, extra := range []string{
			`,"namespace_id":"` + owner.NamespaceID + `"`, `,"application_id":"` + owner.ApplicationID + `"`,
			`,"credential_id":"` + owner.CredentialID + `"`,
		} {
			wantError(t, e.post(t, owner, "/v1/subscriptions", newKey(), createBody(q, "scoped", extra)), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("NothingChanged", func(t *testing.T) {
		e.wantUntouched(t, owner, s.ID, d.ID)
	})
}
