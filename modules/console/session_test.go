package console

import (
	"crypto/tls"
	"net/http/httptest"
	"testing"
)

// TestO9_CookiesSecureOutsideLoopback: the console's cookies are Secure
// unless the browser reaches it over plain HTTP on a loopback address.
func TestO9_CookiesSecureOutsideLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1:8080": false, "localhost:8080": false, "[::1]:8080": false, "127.0.0.1": false,
		"orbit.example.com": true, "10.0.0.5:8080": true, "[2001:db8::1]:443": true,
	} {
		r := httptest.NewRequest("GET", "http://"+host+"/console/", nil)
		r.Host = host
		if got := secureCookies(r); got != want {
			t.Errorf("%s: Secure %v, want %v", host, got, want)
		}
	}
	r := httptest.NewRequest("GET", "https://127.0.0.1/console/", nil)
	r.TLS = &tls.ConnectionState{}
	if !secureCookies(r) {
		t.Error("TLS on loopback: not Secure")
	}
}

// TestO9_CSRFTokenBoundToSession: a session's CSRF token is stable for
// the session and differs for another one.
func TestO9_CSRFTokenBoundToSession(t *testing.T) {
	t.Parallel()
	a, b := randomHex(32), randomHex(32)
	if csrfToken(a) != csrfToken(a) || csrfToken(a) == csrfToken(b) || len(csrfToken(a)) != 43 {
		t.Errorf("tokens %q %q %q", csrfToken(a), csrfToken(a), csrfToken(b))
	}
	if !equal(csrfToken(a), csrfToken(a)) || equal(csrfToken(a), csrfToken(b)) {
		t.Error("equal does not compare")
	}
}
