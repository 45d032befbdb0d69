// Package admin is the identity module: namespaces, applications,
// environments, queues, credentials, permissions, queue grants and the audit
// log. It serves `GET /v1/credential` and `GET /v1/queues`, provides the `orbit admin` commands,
// and offers the other modules auth.Authenticator, auth.ApplicationLocker
// and audit.Writer.
package admin

import (
	"context"
	"database/sql"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules"
)

func init() { modules.Register(&Module{}) }

// Module is the admin module.
type Module struct {
	store *Store
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:    "admin",
		Roles: []string{"server", "admin"},
		New:   func() modules.Module { return &Module{} },
	}
}

// Provision builds the store on the platform database.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	m.store = NewStore(env.DB)
	return nil
}

// Authenticate resolves an Authorization header value against the
// credentials (auth.Authenticator). It is called after Provision.
func (m *Module) Authenticate(ctx context.Context, header string) (*auth.Principal, error) {
	return m.store.Authenticate(ctx, header)
}

// AuthenticateCached is Authenticate answered from the node's recent
// authentications when it can (auth.CachedAuthenticator). It is called
// after Provision.
func (m *Module) AuthenticateCached(ctx context.Context, header string) (*auth.Principal, error) {
	return m.store.AuthenticateCached(ctx, header)
}

// CredentialPrincipal resolves a credential by ID, refusing a revoked
// one (see Store.CredentialPrincipal). The console resolves its sessions'
// credentials with it on every request. It is called after Provision.
func (m *Module) CredentialPrincipal(ctx context.Context, credentialID string) (*auth.Principal, error) {
	return m.store.CredentialPrincipal(ctx, credentialID)
}

// CheckGrants checks grants through q, the caller's transaction
// (auth.GrantChecker). It is called after Provision.
func (m *Module) CheckGrants(ctx context.Context, q auth.Querier, grants []auth.Grant) ([]error, error) {
	return m.store.CheckGrants(ctx, q, grants)
}

// ApplicationLock locks the application's row in tx
// (auth.ApplicationLocker). It is called after Provision.
func (m *Module) ApplicationLock(ctx context.Context, tx *sql.Tx, applicationID string) error {
	return m.store.ApplicationLock(ctx, tx, applicationID)
}

// Audit appends r to the audit log inside tx (audit.Writer). It is called
// after Provision.
func (m *Module) Audit(ctx context.Context, tx *sql.Tx, r audit.Record) error {
	return m.store.Audit(ctx, tx, r)
}

// QueueNamespaces returns the namespace of up to limit queues, keyed by
// queue id, read through q (see the package function).
func (m *Module) QueueNamespaces(ctx context.Context, q auth.Querier, limit int) (map[string]string, error) {
	return QueueNamespaces(ctx, q, limit)
}

// Routes mounts GET /v1/credential and GET /v1/queues.
func (m *Module) Routes(r *mux.Router) {
	r.Handle("/v1/credential", auth.Require(m, "", http.HandlerFunc(m.getCredential))).Methods(http.MethodGet)
	r.Handle("/v1/queues", auth.Require(m, "", http.HandlerFunc(m.listQueues))).Methods(http.MethodGet)
}

// Commands returns `orbit admin`.
func (m *Module) Commands(cli modules.CLI) []*cobra.Command {
	return []*cobra.Command{adminCommand(cli.Open)}
}

// credentialView is the wire form of the caller's own credential. It never
// holds the token or its digest.
type credentialView struct {
	ID            string   `json:"id"`
	NamespaceID   string   `json:"namespace_id"`
	Namespace     string   `json:"namespace"`
	ApplicationID string   `json:"application_id"`
	Application   string   `json:"application"`
	EnvironmentID string   `json:"environment_id"`
	Environment   string   `json:"environment"`
	Permissions   []string `json:"permissions"`
	QueueIDs      []string `json:"queue_ids"`
}

func (m *Module) getCredential(w http.ResponseWriter, r *http.Request) {
	if _, err := httpx.Query(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	p := auth.FromContext(r.Context())
	ns, app, env, err := m.store.scopeNames(r.Context(), p.NamespaceID, p.ApplicationID, p.EnvironmentID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, http.StatusOK, credentialView{
		ID: p.CredentialID, NamespaceID: p.NamespaceID, Namespace: ns,
		ApplicationID: p.ApplicationID, Application: app,
		EnvironmentID: p.EnvironmentID, Environment: env,
		Permissions: p.SortedPermissions(), QueueIDs: p.SortedQueues(),
	})
}

var (
	_ modules.Provisioner      = (*Module)(nil)
	_ modules.Router           = (*Module)(nil)
	_ modules.Commander        = (*Module)(nil)
	_ auth.CachedAuthenticator = (*Module)(nil)
	_ auth.ApplicationLocker   = (*Module)(nil)
	_ audit.Writer             = (*Module)(nil)
)
