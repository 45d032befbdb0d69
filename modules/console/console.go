// Package console is the web console of `orbit serve` (O-9): server-rendered
// pages under /console/ for queues, tasks, subscriptions and deliveries,
// signed in with a credential's token.
//
// The console has no authorization of its own. Every read and write of a
// page is a call of the HTTP API's own handler, in process, through the
// shared router (api.go), as the session's credential: the same permission,
// queue-grant and ownership checks, the same validation, idempotency and
// audit as a client of the API gets. What the API does not serve (a queue's
// task counts, a task's attempts and events, a subscription's activity
// chart) comes from the owning module's offers, and only after the API has
// shown the caller the queue, task or subscription it is about.
package console

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

func init() { modules.Register(&Module{}) }

// sessionTTL is how long a console session lasts after sign-in.
const sessionTTL = 12 * time.Hour

//go:embed migrations/*.sql
var migrationFiles embed.FS

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Principals is what the console needs of the admin module: tokens checked
// at sign-in, and a session's credential resolved afresh on every request.
type Principals interface {
	auth.Authenticator
	CredentialPrincipal(ctx context.Context, credentialID string) (*auth.Principal, error)
}

// TaskReader is what the console needs of the tasks module beyond its API.
type TaskReader interface {
	QueueCounts(ctx context.Context, queueID string) (tasks.QueueCounts, error)
	TaskHistory(ctx context.Context, taskID string) ([]tasks.AttemptView, []tasks.Event, error)
}

// ActivityReader is what the console needs of the subscriptions module
// beyond its API: the chart of deliveries and ACKs per minute.
type ActivityReader interface {
	DeliveryActivity(subscriptionID string) []subscriptions.ActivityMinute
}

// Module is the console module.
type Module struct {
	db       *sql.DB
	auth     Principals
	tasks    TaskReader
	activity ActivityReader
	logger   *slog.Logger
	pages    *pages
	// api is the shared router, whose API handlers the pages call.
	api *mux.Router
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "console",
		Requires: []string{"admin", "tasks", "subscriptions"},
		Roles:    []string{"server"},
		New:      func() modules.Module { return &Module{} },
	}
}

// Migrations returns the module's schema files, under migrations/.
func (*Module) Migrations() fs.FS { return migrationFiles }

// Provision asks the admin, tasks and subscriptions modules for what the
// pages need besides the API, and parses the templates.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	var err error
	if m.auth, err = modules.Require[Principals](env, "admin"); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if m.tasks, err = modules.Require[TaskReader](env, "tasks"); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if m.activity, err = modules.Require[ActivityReader](env, "subscriptions"); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if m.pages, err = parsePages(); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	m.db = env.DB
	m.logger = env.Logger.With("module", "console")
	return nil
}

// Routes mounts the console under /console/ and keeps the router, whose
// API routes the pages call in process.
func (m *Module) Routes(r *mux.Router) {
	m.api = r
	m.routes(r)
}

var (
	_ modules.Migrator    = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Router      = (*Module)(nil)
)
