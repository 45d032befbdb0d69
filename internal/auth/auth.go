// Package auth authenticates bearer tokens and carries the caller's
// credential through a request (C-1 … C-4).
//
// The admin module owns the identity tables; this package is their read side,
// used by every module that serves requests.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/orbitrun/orbit/internal/httpx"
)

// Permissions a credential can hold (C-3).
const (
	PermTasksSubmit    = "tasks:submit"
	PermTasksRead      = "tasks:read"
	PermTasksCancel    = "tasks:cancel"
	PermTasksReview    = "tasks:review"
	PermTasksWork      = "tasks:work"
	PermEventsRead     = "events:read"
	PermEventsConsume  = "events:consume"
	PermEventsManage   = "events:manage"
	tokenPrefix        = "orbit_"
	tokenRandomBytes   = 32
	maxAuthHeaderBytes = 512
)

// AllPermissions lists every permission, sorted.
var AllPermissions = []string{
	PermEventsConsume, PermEventsManage, PermEventsRead,
	PermTasksCancel, PermTasksRead, PermTasksReview, PermTasksSubmit, PermTasksWork,
}

// ValidPermission reports whether p is a known permission.
func ValidPermission(p string) bool {
	for _, known := range AllPermissions {
		if p == known {
			return true
		}
	}
	return false
}

// Principal is the authenticated caller: one credential, its scope, its
// permissions and its queue grants.
type Principal struct {
	CredentialID  string
	NamespaceID   string
	ApplicationID string
	EnvironmentID string
	Permissions   map[string]bool
	Queues        map[string]bool
}

// Can reports whether the principal holds permission perm.
func (p *Principal) Can(perm string) bool { return p.Permissions[perm] }

// HasQueue reports whether the principal holds a grant on the queue.
func (p *Principal) HasQueue(queueID string) bool { return p.Queues[queueID] }

// SortedPermissions returns the principal's permissions in sorted order.
func (p *Principal) SortedPermissions() []string { return sortedKeys(p.Permissions) }

// SortedQueues returns the principal's queue grants in sorted order.
func (p *Principal) SortedQueues() []string { return sortedKeys(p.Queues) }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// NewToken returns a fresh bearer token (256 random bits, base64url, with a
// recognisable prefix so that secret scanners find leaked ones) and its digest.
func NewToken() (token string, digest [32]byte) {
	b := make([]byte, tokenRandomBytes)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, Digest(token)
}

// NewLeaseSecret returns a fresh lease secret (32 random bytes in unpadded
// base64url, 43 characters) and its digest, the only form stored. Workers and
// consumers prove a lease with it.
func NewLeaseSecret() (secret string, digest [32]byte) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	secret = base64.RawURLEncoding.EncodeToString(b)
	return secret, Digest(secret)
}

// Digest is the stored form of a token or a lease secret.
func Digest(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Authenticator resolves bearer tokens against the identity tables.
type Authenticator struct {
	db *sql.DB
}

// NewAuthenticator returns an Authenticator reading from db.
func NewAuthenticator(db *sql.DB) *Authenticator { return &Authenticator{db: db} }

// ErrUnauthenticated is returned for a missing, malformed, unknown or revoked
// token. Callers must not tell these cases apart on the wire.
var ErrUnauthenticated = httpx.Errorf(httpx.CodeUnauthenticated, "missing, invalid or revoked credential")

// Header returns the request's Authorization header when it has exactly
// one. Several are as unauthenticated as a malformed one (C-1): which one
// a proxy or a framework would pick differs, so none is picked.
func Header(h http.Header) (string, bool) {
	values := h.Values("Authorization")
	if len(values) != 1 {
		return "", false
	}
	return values[0], true
}

// AuthenticateRequest resolves the Authorization header of a request, which
// must be exactly one, like Authenticate.
func (a *Authenticator) AuthenticateRequest(ctx context.Context, h http.Header) (*Principal, error) {
	header, ok := Header(h)
	if !ok {
		return nil, ErrUnauthenticated
	}
	return a.Authenticate(ctx, header)
}

// Authenticate resolves an Authorization header value to a Principal. Every
// failure is ErrUnauthenticated; database failures are returned as they are.
// Requests go through AuthenticateRequest, which refuses several headers.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Principal, error) {
	token, ok := bearerToken(header)
	if !ok {
		return nil, ErrUnauthenticated
	}
	digest := Digest(token)
	var (
		p       Principal
		stored  []byte
		revoked sql.NullTime
	)
	err := a.db.QueryRowContext(ctx, `
		SELECT id, namespace_id, application_id, environment_id, token_digest, revoked_at
		FROM credentials WHERE token_digest = ?`, digest[:]).
		Scan(&p.CredentialID, &p.NamespaceID, &p.ApplicationID, &p.EnvironmentID, &stored, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, fmt.Errorf("auth: look up credential: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, digest[:]) != 1 || revoked.Valid {
		return nil, ErrUnauthenticated
	}
	perms, queues, err := Grants(ctx, a.db, p.CredentialID)
	if err != nil {
		return nil, err
	}
	p.Permissions, p.Queues = toSet(perms), toSet(queues)
	return &p, nil
}

// Querier is what Grants reads through: a pool or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Grants returns a credential's permissions and queue grants, each sorted.
func Grants(ctx context.Context, q Querier, credentialID string) (perms, queues []string, err error) {
	rows, err := q.QueryContext(ctx, `
		SELECT 'p', permission FROM credential_permissions WHERE credential_id = ?
		UNION ALL
		SELECT 'q', queue_id FROM credential_queue_grants WHERE credential_id = ?`, credentialID, credentialID)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: load grants: %w", err)
	}
	defer rows.Close()
	perms, queues = []string{}, []string{}
	for rows.Next() {
		var kind, value string
		if err := rows.Scan(&kind, &value); err != nil {
			return nil, nil, fmt.Errorf("auth: load grants: %w", err)
		}
		if kind == "p" {
			perms = append(perms, value)
		} else {
			queues = append(queues, value)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("auth: load grants: %w", err)
	}
	sort.Strings(perms)
	sort.Strings(queues)
	return perms, queues, nil
}

func toSet(values []string) map[string]bool {
	set := make(map[string]bool, len(values))
	for _, v := range values {
		set[v] = true
	}
	return set
}

// bearerToken extracts the token of an "Authorization: Bearer <token>" header.
// The scheme is case-insensitive (RFC 9110); the token must be non-empty and
// contain only token68 characters.
func bearerToken(header string) (string, bool) {
	if len(header) > maxAuthHeaderBytes {
		return "", false
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0) {
			return "", false
		}
	}
	return token, true
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of an authenticated request, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Require wraps next so that it runs only for a caller that is authenticated
// and holds perm (C-1, C-3): 401 UNAUTHENTICATED otherwise (also for
// several Authorization headers), or 403
// PERMISSION_DENIED when the permission is missing. An empty perm requires
// authentication only.
func (a *Authenticator) Require(perm string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.AuthenticateRequest(r.Context(), r.Header)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		if perm != "" && !p.Can(perm) {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", perm))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// ErrNotFound is what a caller gets for a resource outside its queue grants or
// owned by another credential: the same answer as for one that does not exist.
func ErrNotFound(what string) error {
	return httpx.Errorf(httpx.CodeNotFound, "%s not found", what)
}

// Grant is what an operation inside a connection needs of its credential:
// one permission and one queue grant. Connections check it on every claim,
// lease, ACK and completion, so that a revocation, a removed permission or
// a removed queue grant takes effect at once, not at the next heartbeat
// (seed 001 §1: every operation checks the queue scope).
type Grant struct {
	CredentialID string
	Permission   string
	QueueID      string
	// What names the resource that a lost queue grant hides, in the
	// NOT_FOUND message ("subscription", "queue").
	What string
}

// CheckGrants reads through q (a transaction, so that the check and the
// operation see the same commits) whether each grant still holds, in one
// statement that reads each distinct grant once. For each grant it returns
// nil or the error a connection answers before it closes:
// ErrUnauthenticated for a revoked credential, PERMISSION_DENIED for a
// missing permission, NOT_FOUND for a lost queue grant. The error is a
// database failure.
func CheckGrants(ctx context.Context, q Querier, grants []Grant) ([]error, error) {
	if len(grants) == 0 {
		return nil, nil
	}
	index := make(map[Grant]int, len(grants))
	var distinct []Grant
	for _, g := range grants {
		if _, ok := index[g]; !ok {
			index[g] = len(distinct)
			distinct = append(distinct, g)
		}
	}
	const one = `SELECT ?, c.revoked_at IS NULL,
		EXISTS (SELECT 1 FROM credential_permissions p WHERE p.credential_id = c.id AND p.permission = ?),
		EXISTS (SELECT 1 FROM credential_queue_grants g WHERE g.credential_id = c.id AND g.queue_id = ?)
		FROM credentials c WHERE c.id = ?`
	parts := make([]string, len(distinct))
	args := make([]any, 0, 4*len(distinct))
	for i, g := range distinct {
		parts[i] = one
		args = append(args, i, g.Permission, g.QueueID, g.CredentialID)
	}
	rows, err := q.QueryContext(ctx, strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, fmt.Errorf("auth: check grants: %w", err)
	}
	defer rows.Close()
	checked := make([]error, len(distinct))
	for i := range checked {
		checked[i] = ErrUnauthenticated // unless its credential row is found
	}
	for rows.Next() {
		var i int
		var active, permitted, granted bool
		if err := rows.Scan(&i, &active, &permitted, &granted); err != nil {
			return nil, fmt.Errorf("auth: check grants: %w", err)
		}
		if i < 0 || i >= len(distinct) {
			return nil, fmt.Errorf("auth: check grants: row %d of %d", i, len(distinct))
		}
		g := distinct[i]
		switch {
		case !active:
			checked[i] = ErrUnauthenticated
		case !permitted:
			checked[i] = httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", g.Permission)
		case !granted:
			checked[i] = ErrNotFound(g.What)
		default:
			checked[i] = nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: check grants: %w", err)
	}
	out := make([]error, len(grants))
	for i, g := range grants {
		out[i] = checked[index[g]]
	}
	return out, nil
}

// IsGrantError reports whether err is one of the errors of CheckGrants,
// which a connection answers and then closes.
func IsGrantError(err error) bool {
	var he *httpx.Error
	if !errors.As(err, &he) {
		return false
	}
	switch he.Code {
	case httpx.CodeUnauthenticated, httpx.CodePermissionDenied, httpx.CodeNotFound:
		return true
	}
	return false
}
