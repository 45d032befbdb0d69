package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

const (
	// sessionCookie holds "<session id>.<secret>".
	sessionCookie = "orbit_console"
	// signinCookie holds the sign-in form's CSRF token (double submit):
	// there is no session to bind it to yet.
	signinCookie = "orbit_console_signin"
	cookiePath   = "/console/"
	// csrfLabel is what a session's CSRF token is the HMAC of.
	csrfLabel = "orbit console csrf v1"
	// sessionPurgeBatch bounds the expired sessions a sign-in deletes.
	sessionPurgeBatch = 100
)

// session is a signed-in request: the session row, its secret (from the
// cookie, never stored) and the credential's principal, resolved afresh.
type session struct {
	ID        string
	secret    string
	Principal *auth.Principal
}

// CSRF returns the session's CSRF token: an HMAC of a fixed label keyed
// with the session secret. It is worth nothing for another session, and
// it is never stored: a POST proves it by recomputing it from its cookie.
func (s *session) CSRF() string { return csrfToken(s.secret) }

// Can reports whether the session's credential holds perm.
func (s *session) Can(perm string) bool { return s.Principal.Can(perm) }

func csrfToken(secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(csrfLabel))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// equal compares two strings in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// randomHex returns n random bytes in hexadecimal.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("console: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// secureCookies reports whether r's cookies must be Secure: always, unless
// the browser talks to a loopback address over plain HTTP (`orbit dev`,
// tests), where a Secure cookie would never come back.
func secureCookies(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, scoped to
// /console/, Secure outside loopback. maxAge < 0 deletes it.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: cookiePath, MaxAge: maxAge,
		HttpOnly: true, Secure: secureCookies(r), SameSite: http.SameSiteStrictMode,
	})
}

// sessionCreate signs a credential in: a fresh session id and secret, of
// which only the secret's digest is stored. It also deletes up to
// sessionPurgeBatch expired sessions.
func (m *Module) sessionCreate(ctx context.Context, credentialID string) (id, secret string, err error) {
	id, secret = randomHex(16), randomHex(32)
	digest := sha256.Sum256([]byte(secret))
	now := db.Now()
	if _, err := m.db.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at < ? LIMIT ?`, now, sessionPurgeBatch); err != nil {
		return "", "", fmt.Errorf("console: purge sessions: %w", err)
	}
	if _, err := m.db.ExecContext(ctx, `INSERT INTO console_sessions (id, secret_digest, credential_id, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?)`, id, digest[:], credentialID, now, now.Add(sessionTTL)); err != nil {
		return "", "", fmt.Errorf("console: create session: %w", err)
	}
	return id, secret, nil
}

// errNoSession is a missing, malformed, unknown, expired or revoked
// session: the browser is sent to sign in.
var errNoSession = errors.New("console: no valid session")

// sessionGet resolves a session cookie: the row by id, the secret's digest
// compared in constant time, the expiry, and then the credential's
// principal, read now, so that a revocation or a changed grant holds at
// once. A revoked credential's sessions are deleted.
func (m *Module) sessionGet(ctx context.Context, cookie string) (*session, error) {
	id, secret, ok := strings.Cut(cookie, ".")
	if !ok || !httpx.ValidID(id) || len(secret) != 64 {
		return nil, errNoSession
	}
	var (
		stored       []byte
		credentialID string
		expires      time.Time
	)
	err := m.db.QueryRowContext(ctx, `SELECT secret_digest, credential_id, expires_at FROM console_sessions WHERE id = ?`, id).
		Scan(&stored, &credentialID, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("console: read session: %w", err)
	}
	digest := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(stored, digest[:]) != 1 {
		return nil, errNoSession
	}
	if !db.Now().Before(expires) {
		return nil, m.sessionDelete(ctx, id)
	}
	p, err := m.auth.CredentialPrincipal(ctx, credentialID)
	if errors.Is(err, auth.ErrUnauthenticated) {
		if _, err := m.db.ExecContext(ctx, `DELETE FROM console_sessions WHERE credential_id = ?`, credentialID); err != nil {
			return nil, fmt.Errorf("console: end sessions: %w", err)
		}
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	return &session{ID: id, secret: secret, Principal: p}, nil
}

// sessionDelete ends a session and returns errNoSession.
func (m *Module) sessionDelete(ctx context.Context, id string) error {
	if _, err := m.db.ExecContext(ctx, `DELETE FROM console_sessions WHERE id = ?`, id); err != nil {
		return fmt.Errorf("console: end session: %w", err)
	}
	return errNoSession
}
