package server_test

// Authentication, scope and permissions (C-1 … C-4), end to end.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
)

func TestC1_Authentication(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	revoked := srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
	if resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: revoked.Token}); resp.Status != http.StatusOK {
		t.Fatalf("before revocation: %d %s", resp.Status, resp.Body)
	}
	revoke(t, srv, revoked.CredentialID)
	unknown, _ := auth.NewToken()

	tests := []struct {
		name   string
		header []string // Authorization values; nil sends none
	}{
		{name: "NoHeader"},
		{name: "EmptyHeader", header: []string{""}},
		{name: "SchemeOnly", header: []string{"Bearer"}},
		{name: "EmptyToken", header: []string{"Bearer "}},
		{name: "DoubleSpace", header: []string{"Bearer  " + cred.Token}},
		{name: "TrailingField", header: []string{"Bearer " + cred.Token + " extra"}},
		{name: "TokenWithoutScheme", header: []string{cred.Token}},
		{name: "Basic", header: []string{"Basic b3JiaXQ6c2VjcmV0"}},
		{name: "OtherScheme", header: []string{"Token " + cred.Token}},
		{name: "TruncatedToken", header: []string{"Bearer " + cred.Token[:len(cred.Token)-1]}},
		{name: "UnknownToken", header: []string{"Bearer " + unknown}},
		{name: "RevokedToken", header: []string{"Bearer " + revoked.Token}},
		{name: "Oversized", header: []string{"Bearer " + cred.Token + strings.Repeat("A", 600)}},
	}
	var mu sync.Mutex
	messages := map[string]bool{}
	t.Run("Rejected", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				for _, req := range []rawRequest{
					{method: http.MethodGet, path: "/v1/credential"},
					{method: http.MethodGet, path: "/v1/test-widgets"},
					{method: http.MethodPost, path: "/v1/test-widgets", body: strings.NewReader(`{"name":"w"}`)},
				} {
					req.header = writeHeader("", "c1-"+tt.name)
					for _, v := range tt.header {
						req.header.Add("Authorization", v)
					}
					resp := mustSend(t, srv, req)
					wantError(t, resp, http.StatusUnauthorized, httpx.CodeUnauthenticated)
					mu.Lock()
					messages[resp.Error.Message] = true
					mu.Unlock()
				}
			})
		}
	})
	if len(messages) != 1 {
		t.Errorf("401 messages tell the cases apart: %q", slices.Sorted(maps.Keys(messages)))
	}
	if n := countWidgets(t, srv, cred.CredentialID) + countWidgets(t, srv, revoked.CredentialID); n != 0 {
		t.Errorf("unauthenticated writes created %d widgets", n)
	}

	t.Run("SchemeIsCaseInsensitive", func(t *testing.T) {
		for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
			resp := mustSend(t, srv, rawRequest{method: http.MethodGet, path: "/v1/credential",
				header: http.Header{"Authorization": {scheme + " " + cred.Token}}})
			wantData(t, resp, http.StatusOK, nil)
		}
	})

	t.Run("CredentialInURL", func(t *testing.T) {
		for _, tt := range []struct{ name, method, path, auth string }{
			{name: "AccessTokenAlone", method: http.MethodGet, path: "/v1/credential?access_token=" + cred.Token},
			{name: "AccessTokenWithHeader", method: http.MethodGet, path: "/v1/credential?access_token=" + cred.Token, auth: "Bearer " + cred.Token},
			{name: "Token", method: http.MethodGet, path: "/v1/test-widgets?limit=5&token=" + cred.Token, auth: "Bearer " + cred.Token},
			{name: "Write", method: http.MethodPost, path: "/v1/test-widgets?access_token=" + cred.Token, auth: "Bearer " + cred.Token},
			{name: "UnknownRoute", method: http.MethodGet, path: "/v1/nowhere?access_token=" + cred.Token},
			{name: "Health", method: http.MethodGet, path: "/healthz?api_key=" + cred.Token},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := writeHeader("", "c1-url-"+tt.name)
				if tt.auth != "" {
					h.Set("Authorization", tt.auth)
				}
				resp := mustSend(t, srv, rawRequest{method: tt.method, path: tt.path, header: h, body: strings.NewReader(`{"name":"url"}`)})
				wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
				if strings.Contains(string(resp.Body), cred.Token) {
					t.Errorf("the reply repeats the token: %s", resp.Body)
				}
			})
		}
		if n := countWidgets(t, srv, cred.CredentialID); n != 0 {
			t.Errorf("a write with a token in the URL created %d widgets", n)
		}
	})

	// C-4: whatever happened above, no token reached the log.
	for _, token := range []string{cred.Token, revoked.Token, unknown} {
		if strings.Contains(srv.Logs(), token) || strings.Contains(srv.Logs(), token[len("orbit_"):]) {
			t.Fatal("a token was logged")
		}
	}
}

func TestC2_ScopeComesFromCredential(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	for _, tt := range []struct{ name, field, value string }{
		{"BodyNamesNamespace", "namespace_id", cred.NamespaceID},
		{"BodyNamesApplication", "application_id", cred.ApplicationID},
		{"BodyNamesEnvironment", "environment_id", cred.EnvironmentID},
		{"BodyNamesCredential", "credential_id", cred.CredentialID},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
				IdempotencyKey: "c2-" + tt.field, Body: fmt.Sprintf(`{"name":"w",%q:%q}`, tt.field, tt.value)})
			wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
		})
	}
	t.Run("QueryNamesCredential", func(t *testing.T) {
		resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets?credential_id=" + cred.CredentialID, Token: cred.Token})
		wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
	})
	t.Run("WriteTakesScopeOfCaller", func(t *testing.T) {
		w := createWidget(t, srv, cred.Token, "scoped")
		var credID, nsID string
		if err := srv.DB.QueryRow(`SELECT credential_id, namespace_id FROM test_widgets WHERE id = ?`, w.ID).Scan(&credID, &nsID); err != nil {
			t.Fatal(err)
		}
		if credID != cred.CredentialID || nsID != cred.NamespaceID {
			t.Fatalf("widget stored with credential %s namespace %s, want %s %s", credID, nsID, cred.CredentialID, cred.NamespaceID)
		}
	})
}

func TestC3_PermissionsAndGrants(t *testing.T) {
	t.Parallel()
	srv, full := setup(t)
	reader := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermTasksRead}})
	submitter := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermTasksSubmit}})
	nothing := srv.Credential(t, servertest.CredentialParams{})
	sibling := srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
	ungranted := srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions, NoQueueGrant: true})
	foreign := srv.Credential(t, servertest.CredentialParams{Namespace: "other-ns", Permissions: allTaskPermissions})
	owned := createWidget(t, srv, full.Token, "owned")

	get := func(token, path string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path, Token: token})
	}
	post := func(token, path, key, body string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: token, IdempotencyKey: key, Body: body})
	}

	t.Run("MissingPermissionIsDenied", func(t *testing.T) {
		wantError(t, post(reader.Token, "/v1/test-widgets", "c3-reader", `{"name":"w"}`), http.StatusForbidden, httpx.CodePermissionDenied)
		wantError(t, post(reader.Token, "/v1/test-widgets/"+owned.ID+":slow", "c3-reader", `{}`), http.StatusForbidden, httpx.CodePermissionDenied)
		wantError(t, get(submitter.Token, "/v1/test-widgets"), http.StatusForbidden, httpx.CodePermissionDenied)
		wantError(t, get(nothing.Token, "/v1/test-widgets"), http.StatusForbidden, httpx.CodePermissionDenied)
		wantError(t, post(nothing.Token, "/v1/test-widgets", "c3-nothing", `{"name":"w"}`), http.StatusForbidden, httpx.CodePermissionDenied)
		if n := countWidgets(t, srv, reader.CredentialID) + countWidgets(t, srv, nothing.CredentialID); n != 0 {
			t.Errorf("denied writes created %d widgets", n)
		}
		if got := counterOf(t, srv, owned.ID); got != 0 {
			t.Errorf("a denied write changed the widget: counter %d", got)
		}
	})

	t.Run("GrantedPermissionIsEnough", func(t *testing.T) {
		wantData(t, get(reader.Token, "/v1/test-widgets"), http.StatusOK, nil)
		createWidget(t, srv, submitter.Token, "by-submitter")
		// A credential without permissions is still a credential.
		wantData(t, get(nothing.Token, "/v1/credential"), http.StatusOK, nil)
	})

	t.Run("AuthenticationComesFirst", func(t *testing.T) {
		unknown, _ := auth.NewToken()
		wantError(t, post(unknown, "/v1/test-widgets", "c3-unknown", `{"name":"w"}`), http.StatusUnauthorized, httpx.CodeUnauthenticated)
		gone := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermTasksRead}})
		revoke(t, srv, gone.CredentialID)
		wantError(t, post(gone.Token, "/v1/test-widgets", "c3-gone", `{"name":"w"}`), http.StatusUnauthorized, httpx.CodeUnauthenticated)
	})

	t.Run("ResourceOfAnotherCredentialIsNotFound", func(t *testing.T) {
		wantData(t, get(full.Token, "/v1/test-widgets/"+owned.ID), http.StatusOK, nil)
		missing := get(full.Token, "/v1/test-widgets/"+db.NewID())
		wantError(t, missing, http.StatusNotFound, httpx.CodeNotFound)
		for _, other := range []servertest.Credential{sibling, foreign, reader} {
			resp := get(other.Token, "/v1/test-widgets/"+owned.ID)
			wantError(t, resp, http.StatusNotFound, httpx.CodeNotFound)
			if resp.Error.Message != missing.Error.Message {
				t.Errorf("message %q differs from that of a widget that does not exist (%q)", resp.Error.Message, missing.Error.Message)
			}
		}
		wantError(t, post(sibling.Token, "/v1/test-widgets/"+owned.ID+":slow", "c3-sibling", `{}`), http.StatusNotFound, httpx.CodeNotFound)
		if got := counterOf(t, srv, owned.ID); got != 0 {
			t.Errorf("another credential changed the widget: counter %d", got)
		}
		var page widgetPage
		wantData(t, get(sibling.Token, "/v1/test-widgets"), http.StatusOK, &page)
		for _, item := range page.Items {
			if item.ID == owned.ID {
				t.Error("the list of another credential shows the widget")
			}
		}
	})

	t.Run("QueueOutsideGrantsIsNotFound", func(t *testing.T) {
		var q map[string]string
		wantData(t, get(full.Token, "/v1/test-queues/"+full.QueueID), http.StatusOK, &q)
		if q["name"] != full.Queue {
			t.Errorf("queue = %v, want %s", q, full.Queue)
		}
		missing := get(full.Token, "/v1/test-queues/"+db.NewID())
		wantError(t, missing, http.StatusNotFound, httpx.CodeNotFound)
		for _, other := range []servertest.Credential{ungranted, foreign} {
			resp := get(other.Token, "/v1/test-queues/"+full.QueueID)
			wantError(t, resp, http.StatusNotFound, httpx.CodeNotFound)
			if resp.Error.Message != missing.Error.Message {
				t.Errorf("message %q differs from that of a queue that does not exist (%q)", resp.Error.Message, missing.Error.Message)
			}
		}
		wantData(t, get(foreign.Token, "/v1/test-queues/"+foreign.QueueID), http.StatusOK, nil)
	})
}

func TestC4_TokenStoredAsDigest(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	if !strings.HasPrefix(cred.Token, "orbit_") || len(cred.Token) < len("orbit_")+43 {
		t.Fatalf("token %q: want orbit_ and at least 256 bits of base64url", cred.Token[:8])
	}
	var digest []byte
	if err := srv.DB.QueryRow(`SELECT token_digest FROM credentials WHERE id = ?`, cred.CredentialID).Scan(&digest); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256([]byte(cred.Token)); !bytes.Equal(digest, sum[:]) {
		t.Fatal("the stored digest is not the SHA-256 of the token")
	}
}

func TestCredentialEndpoint(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Namespace: "acme", Application: "billing", Environment: "prod",
		Queue: "invoices", Permissions: []string{auth.PermTasksSubmit, auth.PermEventsRead, auth.PermTasksRead}})
	other := srv.Credential(t, servertest.CredentialParams{Namespace: "acme", Application: "billing", Environment: "prod", Queue: "other"})

	resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: cred.Token})
	var members map[string]json.RawMessage
	wantData(t, resp, http.StatusOK, &members)
	var keys []string
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	wantKeys := []string{"application", "application_id", "environment", "environment_id", "id", "namespace", "namespace_id", "permissions", "queue_ids"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("members %v, want %v", keys, wantKeys)
	}
	var got struct {
		ID            string   `json:"id"`
		NamespaceID   string   `json:"namespace_id"`
		Namespace     string   `json:"namespace"`
		ApplicationID string   `json:"application_id"`
		Application   string   `json:"application"`
		EnvironmentID string   `json:"environment_id"`
		Environment   string   `json:"environment"`
		Permissions   []string `json:"permissions"`
		QueueIDs      []string `json:"queue_ids"`
	}
	wantData(t, resp, http.StatusOK, &got)
	if got.ID != cred.CredentialID || got.NamespaceID != cred.NamespaceID || got.ApplicationID != cred.ApplicationID ||
		got.EnvironmentID != cred.EnvironmentID || got.Namespace != "acme" || got.Application != "billing" || got.Environment != "prod" {
		t.Errorf("credential = %+v, want the caller's scope %+v", got, cred.Scope)
	}
	if want := []string{auth.PermEventsRead, auth.PermTasksRead, auth.PermTasksSubmit}; !slices.Equal(got.Permissions, want) {
		t.Errorf("permissions = %v, want %v", got.Permissions, want)
	}
	if !slices.Equal(got.QueueIDs, []string{cred.QueueID}) {
		t.Errorf("queue_ids = %v, want only %s", got.QueueIDs, cred.QueueID)
	}
	sum := sha256.Sum256([]byte(cred.Token))
	for _, secret := range []string{cred.Token, cred.Token[len("orbit_"):], hex.EncodeToString(sum[:])} {
		if strings.Contains(string(resp.Body), secret) {
			t.Fatalf("the reply holds the token or its digest: %s", resp.Body)
		}
	}

	var theirs struct {
		ID          string   `json:"id"`
		Permissions []string `json:"permissions"`
	}
	wantData(t, srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: other.Token}), http.StatusOK, &theirs)
	if theirs.ID != other.CredentialID || len(theirs.Permissions) != 0 {
		t.Errorf("other credential = %+v, want its own id and no permissions", theirs)
	}
}

// ---- C-6, C-7: envelope and error codes --------------------------------------

// Several Authorization headers are refused like a malformed one, on every
// route, whichever of them is valid: a proxy and the server might each
// pick another one.
func TestC1_DuplicateAuthorizationRefused(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	other := srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
	valid, otherValid := "Bearer "+cred.Token, "Bearer "+other.Token
	tests := []struct {
		name   string
		values []string
	}{
		{"SameTokenTwice", []string{valid, valid}},
		{"TwoCredentials", []string{valid, otherValid}},
		{"ValidFirst", []string{valid, "Bearer nobody"}},
		{"ValidLast", []string{"Basic b3JiaXQ6c2VjcmV0", valid}},
		{"EmptyFirst", []string{"", valid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, req := range []rawRequest{
				{method: http.MethodGet, path: "/v1/credential"},
				{method: http.MethodGet, path: "/v1/test-widgets"},
				{method: http.MethodPost, path: "/v1/test-widgets", body: strings.NewReader(`{"name":"w"}`)},
			} {
				req.header = writeHeader("", "c1-dup-"+tt.name)
				req.header["Authorization"] = tt.values
				resp := mustSend(t, srv, req)
				wantError(t, resp, http.StatusUnauthorized, httpx.CodeUnauthenticated)
				if resp.Error.Message != auth.ErrUnauthenticated.Message {
					t.Errorf("%s %s: message %q, want the one of every 401", req.method, req.path, resp.Error.Message)
				}
			}
		})
	}
	if n := countWidgets(t, srv, cred.CredentialID) + countWidgets(t, srv, other.CredentialID); n != 0 {
		t.Errorf("writes with several Authorization headers created %d widgets", n)
	}
}
