package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	pool  *sql.DB
	store *admin.Store
	scope admin.Scope
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := testdb.New(t)
	store := admin.NewStore(pool)
	sc, err := store.ScopeEnsure(t.Context(), &admin.ScopeEnsureParams{Namespace: "ns", Application: "app", Environment: "env", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pool: pool, store: store, scope: sc}
}

func (f *fixture) credential(t *testing.T, label string, perms ...string) (admin.Credential, string) {
	t.Helper()
	c, token, err := f.store.CredentialCreate(t.Context(), &admin.CredentialCreateParams{
		NamespaceID: f.scope.NamespaceID, ApplicationID: f.scope.ApplicationID, EnvironmentID: f.scope.EnvironmentID,
		Label: label, Permissions: perms, Queues: []string{f.scope.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, token
}

func code(err error) string {
	var he *httpx.Error
	if errors.As(err, &he) {
		return string(he.Code)
	}
	return ""
}

func TestC1_Authenticate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c, token := f.credential(t, "reader", auth.PermTasksRead)
	p, err := f.store.Authenticate(t.Context(), "bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	if p.CredentialID != c.ID || p.NamespaceID != f.scope.NamespaceID || !p.Can(auth.PermTasksRead) || p.Can(auth.PermTasksSubmit) || !p.HasQueue(f.scope.QueueID) {
		t.Fatalf("principal %+v; want the credential with tasks:read on its queue", p)
	}
	for name, header := range map[string]string{
		"Unknown":   "Bearer orbit_unknown",
		"Malformed": "Bearer " + token + " x",
		"Basic":     "Basic " + token,
	} {
		if p, err := f.store.Authenticate(t.Context(), header); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %+v, %v; want ErrUnauthenticated", name, p, err)
		}
	}
	if err := f.store.CredentialRevoke(t.Context(), c.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.store.Authenticate(t.Context(), "Bearer "+token); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked: %+v, %v; want ErrUnauthenticated", p, err)
	}
}

func TestCheckGrants(t *testing.T) {
	t.Parallel()
	f := setup(t)
	worker, _ := f.credential(t, "worker", auth.PermTasksWork)
	revoked, _ := f.credential(t, "revoked", auth.PermTasksWork)
	if err := f.store.CredentialRevoke(t.Context(), revoked.ID, "test"); err != nil {
		t.Fatal(err)
	}
	held := auth.Grant{CredentialID: worker.ID, Permission: auth.PermTasksWork, QueueID: f.scope.QueueID, What: "queue"}
	grants := []auth.Grant{
		held,
		{CredentialID: worker.ID, Permission: auth.PermEventsConsume, QueueID: f.scope.QueueID, What: "queue"},
		{CredentialID: worker.ID, Permission: auth.PermTasksWork, QueueID: "other", What: "subscription"},
		{CredentialID: revoked.ID, Permission: auth.PermTasksWork, QueueID: f.scope.QueueID, What: "queue"},
		{CredentialID: "unknown", Permission: auth.PermTasksWork, QueueID: f.scope.QueueID, What: "queue"},
		held,
	}
	want := []string{"", "PERMISSION_DENIED", "NOT_FOUND", "UNAUTHENTICATED", "UNAUTHENTICATED", ""}
	tx, err := f.pool.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	checked, err := f.store.CheckGrants(t.Context(), tx, grants)
	if err != nil || len(checked) != len(grants) {
		t.Fatalf("checked %d of %d grants: %v", len(checked), len(grants), err)
	}
	for i, err := range checked {
		if code(err) != want[i] || (err != nil && !auth.IsGrantError(err)) {
			t.Errorf("grant %d: %v; want %q", i, err, want[i])
		}
	}
	if got := checked[2]; got == nil || got.Error() != auth.ErrNotFound("subscription").Error() {
		t.Errorf("lost queue grant: %v; want the NOT_FOUND of its What", got)
	}
	if none, err := f.store.CheckGrants(t.Context(), f.pool, nil); none != nil || err != nil {
		t.Errorf("no grants: %v, %v; want nothing", none, err)
	}
}

// Operator commands are audited without a credential; modules pass theirs
// to Audit, inside their own transaction.
func TestAudit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c, _ := f.credential(t, "ops", auth.PermTasksRead)
	if err := f.store.CredentialRevoke(t.Context(), c.ID, "rotated"); err != nil {
		t.Fatal(err)
	}
	tx, err := f.pool.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Audit(t.Context(), tx, audit.Record{NamespaceID: f.scope.NamespaceID, CredentialID: c.ID, Action: "test.audit", SubjectID: c.ID, Reason: "by a module"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	type record struct {
		Credential sql.NullString
		Action     string
		Reason     string
	}
	rows, err := f.pool.QueryContext(context.Background(), `SELECT credential_id, action, reason FROM audit_log
		WHERE subject_id = ? AND namespace_id = ? ORDER BY action`, c.ID, f.scope.NamespaceID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []record
	for rows.Next() {
		var r record
		if err := rows.Scan(&r.Credential, &r.Action, &r.Reason); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []record{
		{Action: "credential.create", Reason: "ops"},
		{Action: "credential.revoke", Reason: "rotated"},
		{Credential: sql.NullString{String: c.ID, Valid: true}, Action: "test.audit", Reason: "by a module"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit records %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit record %d = %+v; want %+v", i, got[i], want[i])
		}
	}
}

// TestC1_AuthenticateCached: a token's credential is read once and then
// answered from the store's recent authentications, marked Cached; an
// unknown token is never held, and a fresh read that finds the credential
// revoked drops it.
func TestC1_AuthenticateCached(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c, token := f.credential(t, "cached", auth.PermTasksSubmit)
	first, err := f.store.AuthenticateCached(t.Context(), "Bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.store.AuthenticateCached(t.Context(), "Bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || !second.Cached || second.CredentialID != c.ID || !second.Can(auth.PermTasksSubmit) || !second.HasQueue(f.scope.QueueID) {
		t.Fatalf("first %+v, second %+v; want a fresh read, then the same principal from the cache", first, second)
	}
	for range 2 {
		if p, err := f.store.AuthenticateCached(t.Context(), "Bearer orbit_unknown"); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("unknown token: %+v, %v; want ErrUnauthenticated", p, err)
		}
	}
	if err := f.store.CredentialRevoke(t.Context(), c.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.store.AuthenticateCached(t.Context(), "Bearer "+token); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked through this store: %+v, %v; want ErrUnauthenticated", p, err)
	}
	// Another node's store still holds it until its handler's grant check
	// or a fresh read refuses it.
	other := admin.NewStore(f.pool)
	c2, token2 := f.credential(t, "elsewhere", auth.PermTasksSubmit)
	if _, err := other.AuthenticateCached(t.Context(), "Bearer "+token2); err != nil {
		t.Fatal(err)
	}
	if err := f.store.CredentialRevoke(t.Context(), c2.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if p, err := other.AuthenticateCached(t.Context(), "Bearer "+token2); err != nil || !p.Cached {
		t.Fatalf("revoked elsewhere: %+v, %v; want the cached principal", p, err)
	}
	denied, err := other.CheckGrants(t.Context(), f.pool, []auth.Grant{{CredentialID: c2.ID, Permission: auth.PermTasksSubmit, QueueID: f.scope.QueueID, What: "queue"}})
	if err != nil || !errors.Is(denied[0], auth.ErrUnauthenticated) {
		t.Fatalf("grant check of the revoked credential: %v, %v", denied, err)
	}
	if p, err := other.Authenticate(t.Context(), "Bearer "+token2); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("fresh read: %+v, %v", p, err)
	}
	if p, err := other.AuthenticateCached(t.Context(), "Bearer "+token2); p != nil || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("after a fresh read refused it: %+v, %v; want ErrUnauthenticated", p, err)
	}
}
