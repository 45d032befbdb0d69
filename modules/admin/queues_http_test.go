package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
)

type queuePage struct {
	Items []struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		NamespaceID string `json:"namespace_id"`
		Namespace   string `json:"namespace"`
		CreatedAt   string `json:"created_at"`
	} `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func listQueues(t *testing.T, srv *servertest.Server, token, query string) (*servertest.Response, queuePage) {
	t.Helper()
	r := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/queues" + query, Token: token})
	var p queuePage
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Data, &p); err != nil {
			t.Fatalf("page: %v: %s", err, r.Body)
		}
	}
	return r, p
}

func names(p queuePage) []string {
	var out []string
	for _, q := range p.Items {
		out = append(out, q.Name)
	}
	return out
}

// TestO7_QueueListShowsGrantedQueuesOnly: GET /v1/queues lists the queues
// the credential is granted in its namespace, newest first, paged with
// cursors bound to the credential and the name filter; nothing else.
func TestO7_QueueListShowsGrantedQueuesOnly(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	// A worker-only credential may list its queues: no permission is needed.
	first := srv.Credential(t, servertest.CredentialParams{Queue: "alpha", Permissions: []string{auth.PermTasksWork}})
	store := admin.NewStore(srv.DB)
	var granted []string
	for _, name := range []string{"beta", "gamma"} {
		sc, err := store.ScopeEnsure(t.Context(), &admin.ScopeEnsureParams{Namespace: "ns", Application: "app", Environment: "env", Queue: name})
		if err != nil {
			t.Fatal(err)
		}
		granted = append(granted, sc.QueueID)
	}
	if err := store.CredentialGrantQueues(t.Context(), first.CredentialID, granted); err != nil {
		t.Fatal(err)
	}
	// Not granted: a queue of the same namespace, and one of another
	// namespace granted to another credential.
	srv.Credential(t, servertest.CredentialParams{Queue: "delta", NoQueueGrant: true})
	other := srv.Credential(t, servertest.CredentialParams{Namespace: "other", Queue: "alpha"})

	r, p := listQueues(t, srv, first.Token, "")
	if r.Status != http.StatusOK {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	if got, want := names(p), []string{"gamma", "beta", "alpha"}; !slices.Equal(got, want) {
		t.Fatalf("queues %v, want %v (newest first, granted only)", got, want)
	}
	if p.NextCursor != "" {
		t.Errorf("a full page has next_cursor %q", p.NextCursor)
	}
	for _, q := range p.Items {
		if q.NamespaceID != first.NamespaceID || q.Namespace != "ns" || q.CreatedAt == "" {
			t.Errorf("queue %+v: wrong namespace or no created_at", q)
		}
	}

	t.Run("Pages", func(t *testing.T) {
		var seen []string
		cursor := ""
		for range 4 {
			q := "?limit=1"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			r, p := listQueues(t, srv, first.Token, q)
			if r.Status != http.StatusOK {
				t.Fatalf("page: %d %s", r.Status, r.Body)
			}
			seen = append(seen, names(p)...)
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		if !slices.Equal(seen, []string{"gamma", "beta", "alpha"}) {
			t.Errorf("pages gave %v", seen)
		}
	})
	t.Run("ByName", func(t *testing.T) {
		r, p := listQueues(t, srv, first.Token, "?name=beta")
		if r.Status != http.StatusOK || !slices.Equal(names(p), []string{"beta"}) || p.Items[0].ID != granted[0] {
			t.Fatalf("name=beta: %d %s", r.Status, r.Body)
		}
		if _, p := listQueues(t, srv, first.Token, "?name=delta"); len(p.Items) != 0 {
			t.Errorf("name=delta lists an ungranted queue: %v", names(p))
		}
	})
	t.Run("OtherCredential", func(t *testing.T) {
		_, p := listQueues(t, srv, other.Token, "")
		if !slices.Equal(names(p), []string{"alpha"}) || p.Items[0].ID != other.QueueID {
			t.Errorf("other namespace sees %v", p.Items)
		}
		_, page1 := listQueues(t, srv, first.Token, "?limit=1")
		r, _ := listQueues(t, srv, other.Token, "?limit=1&cursor="+url.QueryEscape(page1.NextCursor))
		if r.Status != http.StatusBadRequest || r.Code() != "INVALID_ARGUMENT" {
			t.Errorf("another credential's cursor: %d %s", r.Status, r.Body)
		}
		r, _ = listQueues(t, srv, first.Token, "?name=beta&limit=1&cursor="+url.QueryEscape(page1.NextCursor))
		if r.Status != http.StatusBadRequest {
			t.Errorf("a cursor used with another name filter: %d %s", r.Status, r.Body)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		for _, q := range []string{"?limit=0", "?limit=101", "?name=", "?name=-x", "?queue_id=" + first.QueueID, "?cursor=abc"} {
			if r, _ := listQueues(t, srv, first.Token, q); r.Status != http.StatusBadRequest || r.Code() != "INVALID_ARGUMENT" {
				t.Errorf("%s: %d %s", q, r.Status, r.Body)
			}
		}
		if r, _ := listQueues(t, srv, "", ""); r.Status != http.StatusUnauthorized {
			t.Errorf("no token: %d", r.Status)
		}
	})
	t.Run("Revoked", func(t *testing.T) {
		c := srv.Credential(t, servertest.CredentialParams{Queue: "alpha"})
		if err := store.CredentialRevoke(t.Context(), c.CredentialID, "test"); err != nil {
			t.Fatal(err)
		}
		if r, _ := listQueues(t, srv, c.Token, ""); r.Status != http.StatusUnauthorized {
			t.Errorf("revoked credential: %d", r.Status)
		}
	})
}

// TestO7_QueueListDocExample keeps the example of docs/api/queues.md true.
func TestO7_QueueListDocExample(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	c := srv.Credential(t, servertest.CredentialParams{Namespace: "default", Queue: "default", Permissions: []string{auth.PermTasksSubmit}})
	r, _ := listQueues(t, srv, c.Token, "?name=default")
	if r.Status != http.StatusOK {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	doctest.Check(t, "../../docs/api/queues.md", "queues-list-response", r.Body)
}
