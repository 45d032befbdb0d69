// Package auth is the identity kit: the Principal a request carries (C-1 …
// C-4), permissions, tokens and lease secrets with their digests, bearer
// header parsing, the Require middleware, and the Authenticator interface.
//
// The admin module owns the identity tables and implements Authenticator;
// this package holds no SQL.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
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
	// Cached says the principal was read from the node's cache of recent
	// authentications (CachedAuthenticator), not now: its credential may
	// have been revoked, or lost a permission or a queue grant, since.
	// Only handlers behind RequireCached get one; before their write they
	// check the grants it uses (GrantChecker), so that a change takes
	// effect at once. The maps are shared with the cache: read only.
	Cached bool
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

// Authenticator resolves callers' credentials. The admin module, which owns
// the identity tables, implements it; every module that serves requests gets
// it with modules.Require[auth.Authenticator](env, "admin").
type Authenticator interface {
	// Authenticate resolves an Authorization header value to a Principal.
	// Every failure is ErrUnauthenticated; database failures are returned
	// as they are. It costs one indexed read of the credential and one of
	// its grants. Requests go through AuthenticateRequest, which refuses
	// several headers.
	Authenticate(ctx context.Context, header string) (*Principal, error)
	GrantChecker
}

// CachedAuthenticator is an Authenticator that can also answer from the
// node's cache of recent authentications, without a statement. A principal
// it answers from the cache has Cached set; one it had to read is fresh.
// Unknown and revoked tokens are never answered from the cache.
type CachedAuthenticator interface {
	Authenticator
	AuthenticateCached(ctx context.Context, header string) (*Principal, error)
}

// GrantChecker checks that credentials still hold what an operation needs.
type GrantChecker interface {
	// CheckGrants reads through q (a transaction, so that the check and the
	// operation see the same commits) whether each grant still holds, in
	// one statement that reads each distinct grant once. For each grant it
	// returns nil or the error a connection answers before it closes:
	// ErrUnauthenticated for a revoked credential, PERMISSION_DENIED for a
	// missing permission, ErrNotFound(grant.What) for a lost queue grant.
	// The error is a database failure.
	CheckGrants(ctx context.Context, q Querier, grants []Grant) ([]error, error)
}

// ApplicationLocker serialises what must be counted per application across
// every node, such as the connections an application holds open (N-4).
// The admin module, which owns the applications, implements it; modules
// get it with modules.Require[auth.ApplicationLocker](env, "admin").
type ApplicationLocker interface {
	// ApplicationLock locks the application's row in tx until tx ends
	// (SELECT … FOR UPDATE on its primary key), so that transactions of
	// any node that lock the same application run one after the other: a
	// count read after the lock sees every commit of the ones before. It
	// costs one primary-key read. No other transaction locks application
	// rows, so callers take it first and lock their own rows after it. An
	// application that does not exist is an error wrapping sql.ErrNoRows.
	ApplicationLock(ctx context.Context, tx *sql.Tx, applicationID string) error
}

// Querier is what CheckGrants reads through: a pool or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

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

// AuthenticateRequest resolves the Authorization header of a request with
// a. The request must have exactly one, in the Bearer scheme; anything else
// is ErrUnauthenticated without consulting a.
func AuthenticateRequest(ctx context.Context, a Authenticator, h http.Header) (*Principal, error) {
	return authenticateRequest(ctx, h, a.Authenticate)
}

func authenticateRequest(ctx context.Context, h http.Header, authenticate func(context.Context, string) (*Principal, error)) (*Principal, error) {
	header, ok := Header(h)
	if !ok {
		return nil, ErrUnauthenticated
	}
	if _, ok := BearerToken(header); !ok {
		return nil, ErrUnauthenticated
	}
	return authenticate(ctx, header)
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// header value. The scheme is case-insensitive (RFC 9110); the token must be
// non-empty and contain only token68 characters. Implementations of
// Authenticator read the header they are given with it.
func BearerToken(header string) (string, bool) {
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

type sessionKey struct{}

// WithSessionPrincipal returns ctx carrying p as the principal of a
// session that its owner (the console module) resolved afresh for this
// request: p must come from CredentialPrincipal, read now, so that a
// revoked credential or a removed grant takes effect at once. Require
// authorizes a request with this context as if p had sent its bearer
// token. Only in-process callers can set it: no header or cookie maps to
// it.
func WithSessionPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, sessionKey{}, p)
}

func sessionPrincipal(ctx context.Context) *Principal {
	p, _ := ctx.Value(sessionKey{}).(*Principal)
	return p
}

// FromContext returns the principal of an authenticated request, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Require wraps next so that it runs only for a caller that a authenticates
// and that holds perm (C-1, C-3): 401 UNAUTHENTICATED otherwise (also for
// several Authorization headers), or 403
// PERMISSION_DENIED when the permission is missing. An empty perm requires
// authentication only.
//
// A request that carries a session principal (WithSessionPrincipal: the
// console's in-process call of an API handler) is authorized with that
// principal in place of the Authorization header; the permission check is
// the same.
func Require(a Authenticator, perm string, next http.Handler) http.Handler {
	return require(a, nil, perm, next)
}

// RequireCached is Require for a handler that checks its caller's grants
// again before it writes (GrantChecker), such as a submission recorded in
// a shared transaction: when a is a CachedAuthenticator, the caller may be
// answered from the node's cache (Principal.Cached). A cached principal
// that lacks perm is read afresh, since the permission may have been
// granted since.
func RequireCached(a Authenticator, perm string, next http.Handler) http.Handler {
	ca, _ := a.(CachedAuthenticator)
	return require(a, ca, perm, next)
}

// require is Require, answering from ca's cache when ca is not nil.
func require(a Authenticator, ca CachedAuthenticator, perm string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := sessionPrincipal(r.Context())
		var err error
		switch {
		case p != nil:
			err = permitted(p, perm)
		case ca != nil:
			p, err = authenticateRequest(r.Context(), r.Header, ca.AuthenticateCached)
			if err == nil {
				if err = permitted(p, perm); err != nil && p.Cached {
					p, err = AuthorizeRequest(r.Context(), a, r.Header, perm)
				}
			}
		default:
			p, err = AuthorizeRequest(r.Context(), a, r.Header, perm)
		}
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		httpx.SetCredential(r, p.CredentialID)
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// AuthorizeRequest is AuthenticateRequest followed by Require's permission
// check: the caller as its credential stands now, or the error Require
// answers. A handler given a cached principal (RequireCached) calls it
// before it refuses the request for any other reason, so that a caller
// whose credential was revoked or lost perm meanwhile gets that answer
// first, as it would have without the cache.
func AuthorizeRequest(ctx context.Context, a Authenticator, h http.Header, perm string) (*Principal, error) {
	p, err := AuthenticateRequest(ctx, a, h)
	if err != nil {
		return nil, err
	}
	if err := permitted(p, perm); err != nil {
		return nil, err
	}
	return p, nil
}

// permitted returns PERMISSION_DENIED unless p holds perm (or perm is
// empty).
func permitted(p *Principal, perm string) error {
	if perm != "" && !p.Can(perm) {
		return httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", perm)
	}
	return nil
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

// IsGrantError reports whether err is one of the errors of
// GrantChecker.CheckGrants, which a connection answers and then closes.
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
