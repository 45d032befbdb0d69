package server_test

import (
	"net/http"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
)

// TestDocsExamples keeps the examples of docs/api/conventions.md and
// docs/api/credential.md equal to what the server returns.
func TestDocsExamples(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential"})
	if resp.Status != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", resp.Status)
	}
	doctest.Check(t, "../../../docs/api/conventions.md", "conventions-error", resp.Body)

	resp = srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: cred.Token})
	if resp.Status != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.Status)
	}
	doctest.Check(t, "../../../docs/api/credential.md", "credential-get-response", resp.Body)

	for _, h := range []struct{ path, example string }{
		{"/healthz", "healthz-response"},
		{"/readyz", "readyz-response"},
	} {
		resp = srv.Do(t, servertest.Request{Method: http.MethodGet, Path: h.path})
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", h.path, resp.Status)
		}
		doctest.Check(t, "../../../docs/api/credential.md", h.example, resp.Body)
	}
}
