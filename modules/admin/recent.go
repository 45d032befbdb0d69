package admin

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
)

// The node's cache of recent authentications (auth.CachedAuthenticator).
// It saves the statement that reads a credential for the requests whose
// handlers check their grants again before writing (auth.RequireCached),
// so a revoked credential or a removed grant still takes effect at once:
// the cache only ever says yes too early, never keeps a change from
// being seen by the write.
const (
	// recentTTL is how long an authentication is answered from the cache
	// before the credential is read again.
	recentTTL = 10 * time.Second
	// recentMax bounds the cached credentials; a full cache is emptied.
	recentMax = 4096
)

// recentPrincipals holds the principals this store read recently, by the
// digest of their token. Unknown and revoked tokens are never held.
type recentPrincipals struct {
	mu      sync.Mutex
	entries map[[32]byte]*recentPrincipal
}

type recentPrincipal struct {
	principal auth.Principal
	lastUsed  sql.NullTime
	readAt    time.Time
}

// get returns the entry of digest when it was read within recentTTL.
func (c *recentPrincipals) get(digest [32]byte, now time.Time) (recentPrincipal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[digest]
	if !ok || now.Sub(e.readAt) >= recentTTL || now.Before(e.readAt) {
		return recentPrincipal{}, false
	}
	return *e, true
}

// put holds p, just read by its token digest.
func (c *recentPrincipals) put(digest [32]byte, p *storedPrincipal, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= recentMax {
		c.entries = make(map[[32]byte]*recentPrincipal)
	}
	c.entries[digest] = &recentPrincipal{principal: p.principal, lastUsed: p.lastUsed, readAt: now}
}

// forget drops the entry of digest.
func (c *recentPrincipals) forget(digest [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, digest)
}

// forgetCredential drops the entries of a credential.
func (c *recentPrincipals) forgetCredential(credentialID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for digest, e := range c.entries {
		if e.principal.CredentialID == credentialID {
			delete(c.entries, digest)
		}
	}
}

// used notes that the last_used_at of digest's credential was written at at.
func (c *recentPrincipals) used(digest [32]byte, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[digest]; ok {
		e.lastUsed = sql.NullTime{Time: at, Valid: true}
	}
}

// AuthenticateCached is Authenticate answered from the store's recent
// authentications when the token's credential was read within recentTTL
// (auth.CachedAuthenticator): the principal is then marked Cached, and
// its holder checks its grants before writing. last_used_at is kept as
// Authenticate keeps it.
func (s *Store) AuthenticateCached(ctx context.Context, header string) (*auth.Principal, error) {
	token, ok := auth.BearerToken(header)
	if !ok {
		return nil, auth.ErrUnauthenticated
	}
	digest := auth.Digest(token)
	now := time.Now()
	// The digest is the key: only the token's holder can name an entry.
	e, ok := s.recent.get(digest, now)
	if !ok {
		return s.authenticate(ctx, digest, now)
	}
	touched, err := s.credentialTouch(ctx, e.principal.CredentialID, e.lastUsed)
	if err != nil {
		return nil, err
	}
	if touched {
		s.recent.used(digest, now)
	}
	p := e.principal
	p.Cached = true
	return &p, nil
}
