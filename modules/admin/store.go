package admin

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Store reads and writes the identity tables and the audit log. It
// implements auth.Authenticator and audit.Writer, which the module offers
// to the others.
type Store struct {
	db     *sql.DB
	recent recentPrincipals
}

// NewStore returns a Store on the platform database.
func NewStore(pool *sql.DB) *Store { return &Store{db: pool} }

// Scope names the objects a credential is bound to, by name and id.
type Scope struct {
	Namespace     string
	NamespaceID   string
	Application   string
	ApplicationID string
	Environment   string
	EnvironmentID string
	Queue         string
	QueueID       string
}

// ScopeEnsureParams names the objects to find or create.
type ScopeEnsureParams struct {
	Namespace   string
	Application string
	Environment string
	Queue       string
}

// ScopeEnsure finds the namespace, application, environment and queue with the
// given names, creating the ones that are missing. It is safe to run
// concurrently: a lost creation race reads the winner's row.
func (s *Store) ScopeEnsure(ctx context.Context, p *ScopeEnsureParams) (Scope, error) {
	sc := Scope{Namespace: p.Namespace, Application: p.Application, Environment: p.Environment, Queue: p.Queue}
	var err error
	if sc.NamespaceID, err = s.ensure(ctx, "namespaces", "", "", p.Namespace); err != nil {
		return sc, err
	}
	if sc.ApplicationID, err = s.ensure(ctx, "applications", "namespace_id", sc.NamespaceID, p.Application); err != nil {
		return sc, err
	}
	if sc.EnvironmentID, err = s.ensure(ctx, "environments", "application_id", sc.ApplicationID, p.Environment); err != nil {
		return sc, err
	}
	if p.Queue != "" {
		if sc.QueueID, err = s.ensure(ctx, "queues", "namespace_id", sc.NamespaceID, p.Queue); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// ensure returns the id of the named row under parent, inserting it first
// when absent. table and parentCol are constants of this file.
func (s *Store) ensure(ctx context.Context, table, parentCol, parentID, name string) (string, error) {
	where, args := "name = ?", []any{name}
	if parentCol != "" {
		where, args = parentCol+" = ? AND name = ?", []any{parentID, name}
	}
	for attempt := 0; attempt < 2; attempt++ {
		var id string
		err := s.db.QueryRowContext(ctx, "SELECT id FROM "+table+" WHERE "+where, args...).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("admin: find %s %q: %w", table, name, err)
		}
		id = db.NewID()
		if parentCol == "" {
			_, err = s.db.ExecContext(ctx, "INSERT INTO "+table+" (id, name, created_at) VALUES (?, ?, ?)", id, name, db.Now())
		} else {
			_, err = s.db.ExecContext(ctx, "INSERT INTO "+table+" (id, "+parentCol+", name, created_at) VALUES (?, ?, ?, ?)", id, parentID, name, db.Now())
		}
		if err == nil {
			return id, nil
		}
		if !db.IsDuplicateKey(err) {
			return "", fmt.Errorf("admin: create %s %q: %w", table, name, err)
		}
	}
	return "", fmt.Errorf("admin: create %s %q: lost the creation race twice", table, name)
}

// Credential is a stored credential, without its token.
type Credential struct {
	ID            string
	NamespaceID   string
	ApplicationID string
	EnvironmentID string
	Label         string
	Permissions   []string
	Queues        []string
	CreatedAt     time.Time
	RevokedAt     *time.Time
}

// CredentialCreateParams describes a new credential.
type CredentialCreateParams struct {
	NamespaceID   string
	ApplicationID string
	EnvironmentID string
	Label         string
	Permissions   []string
	Queues        []string
}

// CredentialCreate stores a new credential with its permissions and queue
// grants in one transaction and returns it with its token. The token is shown
// here once; only its digest is stored.
func (s *Store) CredentialCreate(ctx context.Context, p *CredentialCreateParams) (Credential, string, error) {
	for _, perm := range p.Permissions {
		if !auth.ValidPermission(perm) {
			return Credential{}, "", fmt.Errorf("admin: unknown permission %q (known: %s)", perm, strings.Join(auth.AllPermissions, ", "))
		}
	}
	token, digest := auth.NewToken()
	c := Credential{
		ID: db.NewID(), NamespaceID: p.NamespaceID, ApplicationID: p.ApplicationID, EnvironmentID: p.EnvironmentID,
		Label: p.Label, Permissions: dedupeSorted(p.Permissions), Queues: dedupeSorted(p.Queues), CreatedAt: db.Now(),
	}
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO credentials (id, namespace_id, application_id, environment_id, token_digest, label, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.NamespaceID, c.ApplicationID, c.EnvironmentID, digest[:], c.Label, c.CreatedAt); err != nil {
			return err
		}
		for _, perm := range c.Permissions {
			if _, err := tx.ExecContext(ctx, `INSERT INTO credential_permissions (credential_id, permission) VALUES (?, ?)`, c.ID, perm); err != nil {
				return err
			}
		}
		for _, q := range c.Queues {
			if err := queueInNamespace(ctx, tx, q, c.NamespaceID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO credential_queue_grants (credential_id, queue_id) VALUES (?, ?)`, c.ID, q); err != nil {
				return err
			}
		}
		return s.Audit(ctx, tx, audit.Record{NamespaceID: c.NamespaceID, Action: "credential.create", SubjectID: c.ID, Reason: c.Label})
	})
	if err != nil {
		return Credential{}, "", fmt.Errorf("admin: create credential: %w", err)
	}
	return c, token, nil
}

func queueInNamespace(ctx context.Context, tx *sql.Tx, queueID, namespaceID string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM queues WHERE id = ? AND namespace_id = ?`, queueID, namespaceID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("queue %s does not exist in the credential's namespace", queueID)
	}
	return nil
}

// CredentialGrantQueues adds queue grants to a credential. Grants already held
// are kept; queues must belong to the credential's namespace.
func (s *Store) CredentialGrantQueues(ctx context.Context, credentialID string, queueIDs []string) error {
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		var ns string
		if err := tx.QueryRowContext(ctx, `SELECT namespace_id FROM credentials WHERE id = ? FOR UPDATE`, credentialID).Scan(&ns); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("credential %s does not exist", credentialID)
			}
			return err
		}
		for _, q := range dedupeSorted(queueIDs) {
			if err := queueInNamespace(ctx, tx, q, ns); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO credential_queue_grants (credential_id, queue_id) VALUES (?, ?)`, credentialID, q); err != nil {
				return err
			}
			if err := s.Audit(ctx, tx, audit.Record{NamespaceID: ns, Action: "credential.grant_queue", SubjectID: credentialID, Reason: q}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admin: grant queues: %w", err)
	}
	return nil
}

// CredentialRevoke revokes a credential at once: its token stops working on
// the next request. Revoking a revoked credential is a no-op.
func (s *Store) CredentialRevoke(ctx context.Context, credentialID, reason string) error {
	err := db.Tx(ctx, s.db, func(tx *sql.Tx) error {
		var ns string
		var revoked sql.NullTime
		err := tx.QueryRowContext(ctx, `SELECT namespace_id, revoked_at FROM credentials WHERE id = ? FOR UPDATE`, credentialID).Scan(&ns, &revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("credential %s does not exist", credentialID)
		}
		if err != nil || revoked.Valid {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE credentials SET revoked_at = ? WHERE id = ?`, db.Now(), credentialID); err != nil {
			return err
		}
		return s.Audit(ctx, tx, audit.Record{NamespaceID: ns, Action: "credential.revoke", SubjectID: credentialID, Reason: reason})
	})
	if err != nil {
		return fmt.Errorf("admin: revoke credential: %w", err)
	}
	// Other stores (other nodes) may still answer it from their recent
	// authentications; their handlers' grant checks refuse it.
	s.recent.forgetCredential(credentialID)
	return nil
}

// credentialListParams filters the credential list. Empty fields match all.
type credentialListParams struct {
	NamespaceID string
}

// CredentialListing is a credential as `orbit admin credential list` shows
// it: names besides ids, and when it was last used. It never holds the
// token or its digest.
type CredentialListing struct {
	Credential
	Namespace   string
	Application string
	Environment string
	// QueueNames are the names of Queues, in the same order.
	QueueNames []string
	// LastUsedAt is the last authentication, to within LastUsedResolution;
	// nil when never used.
	LastUsedAt *time.Time
}

// credentialList returns credentials, newest first, with the names of their
// scope, their permissions and their grants.
func (s *Store) credentialList(ctx context.Context, p *credentialListParams) ([]CredentialListing, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT c.id, c.namespace_id, c.application_id, c.environment_id, c.label, c.created_at, c.revoked_at, c.last_used_at,
		       n.name, a.name, e.name
		FROM credentials c
		JOIN namespaces n ON n.id = c.namespace_id
		JOIN applications a ON a.id = c.application_id
		JOIN environments e ON e.id = c.environment_id
		WHERE (? = '' OR c.namespace_id = ?)
		ORDER BY c.created_at DESC, c.id DESC`, p.NamespaceID, p.NamespaceID)
	if err != nil {
		return nil, fmt.Errorf("admin: list credentials: %w", err)
	}
	defer rows.Close()
	var out []CredentialListing
	for rows.Next() {
		var (
			c                 CredentialListing
			revoked, lastUsed sql.NullTime
		)
		if err := rows.Scan(&c.ID, &c.NamespaceID, &c.ApplicationID, &c.EnvironmentID, &c.Label, &c.CreatedAt, &revoked, &lastUsed,
			&c.Namespace, &c.Application, &c.Environment); err != nil {
			return nil, fmt.Errorf("admin: list credentials: %w", err)
		}
		if revoked.Valid {
			t := revoked.Time
			c.RevokedAt = &t
		}
		if lastUsed.Valid {
			t := lastUsed.Time
			c.LastUsedAt = &t
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: list credentials: %w", err)
	}
	rows.Close()
	for i := range out {
		if out[i].Permissions, out[i].Queues, err = credentialGrants(ctx, s.db, out[i].ID); err != nil {
			return nil, err
		}
		if out[i].QueueNames, err = queueNames(ctx, s.db, out[i].Queues); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// queueNames returns the names of the queues with the given ids, in the
// same order; a queue that no longer exists is shown by its id.
func queueNames(ctx context.Context, q db.Querier, ids []string) ([]string, error) {
	names := make([]string, len(ids))
	if len(ids) == 0 {
		return names, nil
	}
	args := db.Args(ids)
	rows, err := q.QueryContext(ctx, `SELECT id, name FROM queues WHERE id IN (`+db.Placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("admin: queue names: %w", err)
	}
	defer rows.Close()
	byID := map[string]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("admin: queue names: %w", err)
		}
		byID[id] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: queue names: %w", err)
	}
	for i, id := range ids {
		names[i] = id
		if n, ok := byID[id]; ok {
			names[i] = n
		}
	}
	return names, nil
}

// scopeNames returns the names of the namespace, application and environment
// of a credential's scope, for display.
func (s *Store) scopeNames(ctx context.Context, namespaceID, applicationID, environmentID string) (ns, app, env string, err error) {
	err = s.db.QueryRowContext(ctx, `
		SELECT n.name, a.name, e.name FROM namespaces n, applications a, environments e
		WHERE n.id = ? AND a.id = ? AND e.id = ?`, namespaceID, applicationID, environmentID).Scan(&ns, &app, &env)
	if err != nil {
		return "", "", "", fmt.Errorf("admin: scope names: %w", err)
	}
	return ns, app, env, nil
}

// Audit appends r to the audit log inside tx (audit.Writer). An empty
// r.CredentialID is stored as NULL: an operator command.
func (s *Store) Audit(ctx context.Context, tx *sql.Tx, r audit.Record) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO audit_log (id, namespace_id, credential_id, action, subject_id, reason, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, db.NewID(), r.NamespaceID, sql.NullString{String: r.CredentialID, Valid: r.CredentialID != ""},
		r.Action, r.SubjectID, r.Reason, db.Now())
	return err
}

// Authenticate resolves an Authorization header value to a Principal
// (auth.Authenticator): one statement reads the credential by its token
// digest together with its grants. Every failure is auth.ErrUnauthenticated;
// database failures are returned as they are.
func (s *Store) Authenticate(ctx context.Context, header string) (*auth.Principal, error) {
	token, ok := auth.BearerToken(header)
	if !ok {
		return nil, auth.ErrUnauthenticated
	}
	return s.authenticate(ctx, auth.Digest(token), time.Now())
}

// authenticate reads the credential of a token digest, records its use
// and keeps it among the recent authentications (AuthenticateCached).
func (s *Store) authenticate(ctx context.Context, digest [32]byte, now time.Time) (*auth.Principal, error) {
	c, err := s.credentialPrincipal(ctx, "token_digest", digest[:])
	if errors.Is(err, auth.ErrUnauthenticated) {
		s.recent.forget(digest)
	}
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(c.digest, digest[:]) != 1 {
		return nil, auth.ErrUnauthenticated
	}
	touched, err := s.credentialTouch(ctx, c.principal.CredentialID, c.lastUsed)
	if err != nil {
		return nil, err
	}
	if touched {
		c.lastUsed = sql.NullTime{Time: now, Valid: true}
	}
	s.recent.put(digest, c, now)
	p := c.principal
	return &p, nil
}

// CredentialPrincipal resolves a credential by its ID to a Principal, for a
// caller that authenticated the credential's token earlier and keeps only
// its ID (a console session). A revoked or unknown credential is
// ErrUnauthenticated. It costs the same one statement as Authenticate and
// does not touch last_used_at.
func (s *Store) CredentialPrincipal(ctx context.Context, credentialID string) (*auth.Principal, error) {
	c, err := s.credentialPrincipal(ctx, "id", credentialID)
	if err != nil {
		return nil, err
	}
	return &c.principal, nil
}

// storedPrincipal is a live credential as credentialPrincipal read it.
type storedPrincipal struct {
	principal auth.Principal
	digest    []byte
	lastUsed  sql.NullTime
}

// principalColumns are the columns credentialPrincipal may look a credential
// up by; both are unique keys.
var principalColumns = map[string]bool{"id": true, "token_digest": true}

// credentialPrincipal reads the credential whose column equals value and its
// permissions and queue grants in one round trip: one UNION ALL whose three
// branches each find the credential through the same unique key. Unknown and
// revoked credentials are auth.ErrUnauthenticated.
func (s *Store) credentialPrincipal(ctx context.Context, column string, value any) (*storedPrincipal, error) {
	if !principalColumns[column] {
		return nil, fmt.Errorf("admin: look up credential by %q: not a unique key", column)
	}
	where := "c." + column + " = ?"
	rows, err := s.db.QueryContext(ctx, `
		SELECT 'c', c.id, c.namespace_id, c.application_id, c.environment_id, c.token_digest, c.revoked_at, c.last_used_at
		FROM credentials c WHERE `+where+`
		UNION ALL
		SELECT 'p', p.permission, NULL, NULL, NULL, NULL, NULL, NULL
		FROM credentials c JOIN credential_permissions p ON p.credential_id = c.id WHERE `+where+`
		UNION ALL
		SELECT 'q', g.queue_id, NULL, NULL, NULL, NULL, NULL, NULL
		FROM credentials c JOIN credential_queue_grants g ON g.credential_id = c.id WHERE `+where,
		value, value, value)
	if err != nil {
		return nil, fmt.Errorf("admin: look up credential: %w", err)
	}
	defer rows.Close()
	var (
		c       storedPrincipal
		found   bool
		revoked sql.NullTime
	)
	c.principal.Permissions, c.principal.Queues = map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var (
			kind, first  string
			ns, app, env sql.NullString
			digest       []byte
			rev, last    sql.NullTime
		)
		if err := rows.Scan(&kind, &first, &ns, &app, &env, &digest, &rev, &last); err != nil {
			return nil, fmt.Errorf("admin: look up credential: %w", err)
		}
		switch kind {
		case "c":
			found = true
			c.principal.CredentialID = first
			c.principal.NamespaceID, c.principal.ApplicationID, c.principal.EnvironmentID = ns.String, app.String, env.String
			c.digest, revoked, c.lastUsed = digest, rev, last
		case "p":
			c.principal.Permissions[first] = true
		case "q":
			c.principal.Queues[first] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: look up credential: %w", err)
	}
	if !found || revoked.Valid {
		return nil, auth.ErrUnauthenticated
	}
	return &c, nil
}

// LastUsedResolution is how stale a credential's last_used_at may be: an
// authentication writes it only when it is older than this, so a busy
// credential costs one UPDATE a minute, not one per request.
const LastUsedResolution = time.Minute

// credentialTouch records that a credential authenticated now, unless its
// last_used_at (as just read) is younger than LastUsedResolution, and
// reports whether it sent the UPDATE (after which last_used_at is recent,
// whichever request wrote it). The
// condition is repeated in the UPDATE, so concurrent requests and nodes
// write it about once between them.
func (s *Store) credentialTouch(ctx context.Context, credentialID string, lastUsed sql.NullTime) (bool, error) {
	now := db.Now()
	stale := now.Add(-LastUsedResolution)
	if lastUsed.Valid && lastUsed.Time.After(stale) {
		return false, nil
	}
	if _, err := s.db.ExecContext(ctx, `
		UPDATE credentials SET last_used_at = ?
		WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`, now, credentialID, stale); err != nil {
		return false, fmt.Errorf("admin: record credential use: %w", err)
	}
	return true, nil
}

// credentialGrants returns a credential's permissions and queue grants, each
// sorted.
func credentialGrants(ctx context.Context, q auth.Querier, credentialID string) (perms, queues []string, err error) {
	rows, err := q.QueryContext(ctx, `
		SELECT 'p', permission FROM credential_permissions WHERE credential_id = ?
		UNION ALL
		SELECT 'q', queue_id FROM credential_queue_grants WHERE credential_id = ?`, credentialID, credentialID)
	if err != nil {
		return nil, nil, fmt.Errorf("admin: load grants: %w", err)
	}
	defer rows.Close()
	perms, queues = []string{}, []string{}
	for rows.Next() {
		var kind, value string
		if err := rows.Scan(&kind, &value); err != nil {
			return nil, nil, fmt.Errorf("admin: load grants: %w", err)
		}
		if kind == "p" {
			perms = append(perms, value)
		} else {
			queues = append(queues, value)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("admin: load grants: %w", err)
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

// CheckGrants reads through q whether each grant still holds
// (auth.GrantChecker), in one statement that reads each distinct grant
// once. q is the caller's transaction, so that the check and the operation
// see the same commits. For each grant it returns nil,
// auth.ErrUnauthenticated for a revoked or unknown credential,
// PERMISSION_DENIED for a missing permission, or auth.ErrNotFound of
// Grant.What for a lost queue grant. The error is a database failure.
func (s *Store) CheckGrants(ctx context.Context, q auth.Querier, grants []auth.Grant) ([]error, error) {
	if len(grants) == 0 {
		return nil, nil
	}
	index := make(map[auth.Grant]int, len(grants))
	var distinct []auth.Grant
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
		return nil, fmt.Errorf("admin: check grants: %w", err)
	}
	defer rows.Close()
	checked := make([]error, len(distinct))
	for i := range checked {
		checked[i] = auth.ErrUnauthenticated // unless its credential row is found
	}
	for rows.Next() {
		var i int
		var active, permitted, granted bool
		if err := rows.Scan(&i, &active, &permitted, &granted); err != nil {
			return nil, fmt.Errorf("admin: check grants: %w", err)
		}
		if i < 0 || i >= len(distinct) {
			return nil, fmt.Errorf("admin: check grants: row %d of %d", i, len(distinct))
		}
		g := distinct[i]
		switch {
		case !active:
			checked[i] = auth.ErrUnauthenticated
		case !permitted:
			checked[i] = httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", g.Permission)
		case !granted:
			checked[i] = auth.ErrNotFound(g.What)
		default:
			checked[i] = nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: check grants: %w", err)
	}
	out := make([]error, len(grants))
	for i, g := range grants {
		out[i] = checked[index[g]]
	}
	return out, nil
}

// ApplicationLock locks the application's row in tx until tx ends
// (auth.ApplicationLocker): the connections of one application are
// admitted one at a time across every node (N-4). Nothing else in Orbit
// locks application rows, so it cannot be part of a deadlock cycle when
// taken before the caller's own rows.
func (s *Store) ApplicationLock(ctx context.Context, tx *sql.Tx, applicationID string) error {
	var id string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM applications WHERE id = ? FOR UPDATE`, applicationID).Scan(&id); err != nil {
		return fmt.Errorf("admin: lock application %s: %w", applicationID, err)
	}
	return nil
}

func dedupeSorted(in []string) []string {
	set := map[string]bool{}
	out := []string{}
	for _, v := range in {
		if !set[v] {
			set[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

var (
	_ auth.CachedAuthenticator = (*Store)(nil)
	_ auth.ApplicationLocker   = (*Store)(nil)
	_ audit.Writer             = (*Store)(nil)
)

// QueueNamespaces returns the namespace of every queue, keyed by queue id,
// for the metrics that label a queue with its namespace: at most limit
// queues, in id order, read through the primary key in one statement.
func QueueNamespaces(ctx context.Context, q auth.Querier, limit int) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, namespace_id FROM queues ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: list queues: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, ns string
		if err := rows.Scan(&id, &ns); err != nil {
			return nil, fmt.Errorf("admin: list queues: %w", err)
		}
		out[id] = ns
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: list queues: %w", err)
	}
	return out, nil
}
