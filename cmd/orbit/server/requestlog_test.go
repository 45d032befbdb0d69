package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
)

// TestO6_RequestLogNamesTheCodeAndTheCredential: the access log line of a
// request answered with an error names its C-7 code, and the line of an
// authenticated request names the credential id, never the token.
func TestO6_RequestLogNamesTheCodeAndTheCredential(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermTasksRead}})

	line := func(t *testing.T, requestID string) string {
		t.Helper()
		for l := range strings.SplitSeq(srv.Logs(), "\n") {
			if strings.Contains(l, "msg=request ") && strings.Contains(l, "request_id="+requestID) {
				return l
			}
		}
		t.Fatalf("no request line for %s in:\n%s", requestID, srv.Logs())
		return ""
	}

	bad := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/tasks?queue_id=nope", Token: cred.Token})
	if bad.Status != http.StatusBadRequest {
		t.Fatalf("status %d: %s", bad.Status, bad.Body)
	}
	l := line(t, bad.RequestID)
	if !strings.Contains(l, "code=INVALID_ARGUMENT") || !strings.Contains(l, "credential_id="+cred.CredentialID) || strings.Contains(l, cred.Token) {
		t.Fatalf("request line of a 400: %s", l)
	}

	ok := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: cred.Token})
	if ok.Status != http.StatusOK {
		t.Fatalf("status %d: %s", ok.Status, ok.Body)
	}
	if l := line(t, ok.RequestID); strings.Contains(l, "code=") || !strings.Contains(l, "credential_id="+cred.CredentialID) {
		t.Fatalf("request line of a 200: %s", l)
	}

	anonymous := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/credential", Token: "orbit_wrong"})
	if anonymous.Status != http.StatusUnauthorized {
		t.Fatalf("status %d: %s", anonymous.Status, anonymous.Body)
	}
	if l := line(t, anonymous.RequestID); !strings.Contains(l, "code=UNAUTHENTICATED") || strings.Contains(l, "credential_id=") || strings.Contains(l, "orbit_wrong") {
		t.Fatalf("request line of a 401: %s", l)
	}
}
