package servertest

import (
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
)

// TestF6_SecretsFindsTokensAndLeaseSecrets: the scan every test server's
// logs go through at the end of its test finds bearer tokens and lease
// secrets, and passes the ids, request ids and digests a log may hold.
func TestF6_SecretsFindsTokensAndLeaseSecrets(t *testing.T) {
	t.Parallel()
	token, _ := auth.NewToken()
	secret, _ := auth.NewLeaseSecret()
	clean := `time=2026-12-01T17:00:00Z level=INFO msg=request request_id=0123456789abcdef0123456789abcdef ` +
		`route=/v1/tasks/{id} status=200 credential_id=fedcba9876543210fedcba9876543210 duration=1.5ms`
	if got := Secrets(clean); len(got) != 0 {
		t.Fatalf("Secrets(clean line) = %v", got)
	}
	for _, logged := range []string{
		clean + " header=" + token,
		clean + " lease_secret=" + secret,
		`msg="frame" body="{\"lease_secret\":\"` + secret + `\"}"`,
		secret,
	} {
		got := Secrets(logged)
		if len(got) != 1 || !strings.Contains(logged, got[0]) {
			t.Errorf("Secrets(%q) = %v, want the one secret", logged, got)
		}
	}
}
