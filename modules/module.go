// Package modules is the module-authoring API of the orbit binary and the host
// that runs modules.
//
// A module is one package under modules/ with one struct that returns its Info.
// The package registers the module in init() with Register, and cmd/orbit plugs
// it into the binary with a blank import. Everything else a module can do is an
// optional interface, discovered by type assertion: a config section
// (Configurer, Validator), set-up (Provisioner), HTTP routes (Router), a
// lifecycle (Starter, Stopper), CLI commands (Commander) and schema
// migrations (Migrator).
package modules

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"sync"

	"github.com/gorilla/mux"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/metrics"
)

// Info identifies a module and declares its place in the module graph. Info
// is static data: computing it must have no side effects.
type Info struct {
	// ID is the module's name and its YAML key, e.g. "inbox-receiver".
	ID string
	// Requires lists the IDs of modules that must start before this one.
	Requires []string
	// Roles names the sets this module belongs to: "server" modules run under
	// `orbit serve`, "receiver" modules under `orbit receiver`, "admin"
	// modules provide `orbit admin`.
	Roles []string
	// New returns a fresh, unconfigured instance.
	New func() Module
}

// Module is implemented by every module.
type Module interface {
	OrbitModule() Info
}

// Configurer is implemented by modules that read a config section under their
// ID. Config returns a pointer to the module's config struct, already holding
// the defaults; the host decodes the section into it strictly (unknown keys are
// errors) before Validate and Provision. It is called once per instance.
type Configurer interface {
	Config() any
}

// Validator is implemented by modules that check their config. Validate
// returns every problem at once (use go-multierror), each naming the key at
// fault. It must be fast and must not touch the network or the database.
type Validator interface {
	Validate() error
}

// Provisioner is implemented by modules that need set-up before routes are
// mounted or Start is called: building stores, reading other modules. It is
// called in dependency order; a failure aborts the run before anything starts.
type Provisioner interface {
	Provision(ctx context.Context, env *Env) error
}

// Router is implemented by modules that serve HTTP. Routes mounts the
// module's handlers on the shared router; it is called after Provision.
type Router interface {
	Routes(r *mux.Router)
}

// Starter is implemented by modules with background work. Start must return
// quickly, running its work in goroutines it owns until Stop.
type Starter interface {
	Start(ctx context.Context) error
}

// Stopper is implemented by modules with background work or resources. Stop
// must be idempotent, bounded by ctx, and safe to call when Start was never
// called or failed.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Commander is implemented by modules that add CLI commands. Commands are
// built before any config is read; a running command asks cli for what it
// needs: the loaded configuration, or that and the platform database.
type Commander interface {
	Commands(cli CLI) []*cobra.Command
}

// Migrator is implemented by modules that own tables. Migrations returns
// the module's schema files: an FS whose directory migrations holds them as
// NNNNNN_<what>.sql, which is what a package with
//
//	//go:embed migrations/*.sql
//	var migrationFiles embed.FS
//
// returns. Version numbers are global across modules: a new file takes the
// next free number, whatever module it belongs to (migrations/README.md).
// Migrations is called on fresh, unconfigured instances by every command that
// checks or applies the schema: it must be pure and cheap, with no side
// effects, and return the same static files every time. A file, once
// released, never changes; a change is a new file.
type Migrator interface {
	Migrations() fs.FS
}

// CLI gives running commands their configuration.
type CLI struct {
	// Open loads the configuration and opens the platform database, whose
	// schema must be current. The returned func releases what it opened.
	Open func(cmd *cobra.Command) (*Env, func(), error)
	// LoadConfig loads and validates the configuration only, for commands
	// that do not use the platform database.
	LoadConfig func(cmd *cobra.Command) (*config.Config, error)
}

// Env is what the host hands to modules: shared infrastructure only, never
// another module's fields.
type Env struct {
	Config *config.Config
	DB     *sql.DB
	Logger *slog.Logger
	// Metrics is the node's registry: modules register their collectors
	// and their database refreshers (metrics.Refresher) on it from
	// Provision. It is nil for commands that do not serve; the kit's
	// methods accept that.
	Metrics *metrics.Registry
	// Tracing is the node's tracer provider, or nil when tracing is off
	// (tracing.otlp_endpoint unset): modules make their tracers with
	// tracing.NewTracer, which is off for nil.
	Tracing trace.TracerProvider
	// NodeID identifies this run of `orbit serve` among the nodes sharing
	// the database: a new db.NewID for every run, made once by the host.
	// Modules record it with what belongs to the node, such as its
	// connections' sessions. It is "" for CLI commands.
	NodeID string

	host *Host
}

// Module returns the running instance of the module with the given ID, for a
// module that declared it in Requires. It returns nil when the module is not
// part of this run.
func (e *Env) Module(id string) Module {
	if e.host == nil {
		return nil
	}
	return e.host.byID[id]
}

// Require returns what module id offers as T, for a module that declared id
// in its Requires and needs only the capability T from it: an interface the
// requiring module declares (or a kit declares), never the other module's
// concrete type, so that no module reaches into another's fields. It is an
// error when id is not part of this run or does not offer T. Call it from
// Provision, when every required module has been provisioned.
func Require[T any](env *Env, id string) (T, error) {
	var zero T
	m := env.Module(id)
	if m == nil {
		return zero, fmt.Errorf("modules: required module %q is not part of this run", id)
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("modules: module %q does not offer %T", id, (*T)(nil))
	}
	return t, nil
}

// Offered returns every module of the run that offers T, in start order:
// capability discovery for a module that serves whoever offers T without
// requiring them (the way the tasks module asks who holds result-log
// events), where Require is for a module that needs one named module. T is
// an interface the asking module declares. The modules returned may not be
// provisioned yet when Offered is called from Provision: call their methods
// from Start on.
func Offered[T any](env *Env) []T {
	if env.host == nil {
		return nil
	}
	var out []T
	for _, m := range env.host.order {
		if t, ok := m.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Info{}
	validID    = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
)

// Register adds a module to the binary. It is called from the module
// package's init and panics on a programmer error: an invalid or duplicate ID,
// or a missing constructor.
func Register(m Module) {
	info := m.OrbitModule()
	if !validID.MatchString(info.ID) {
		panic(fmt.Sprintf("modules: invalid module id %q", info.ID))
	}
	if info.New == nil {
		panic(fmt.Sprintf("modules: module %q has no constructor", info.ID))
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[info.ID]; dup {
		panic(fmt.Sprintf("modules: module %q registered twice", info.ID))
	}
	registry[info.ID] = info
}

// Registered returns the info of every registered module, sorted by ID.
func Registered() []Info {
	registryMu.RLock()
	defer registryMu.RUnlock()
	infos := make([]Info, 0, len(registry))
	for _, info := range registry {
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	return infos
}

// Lookup returns the info of a registered module.
func Lookup(id string) (Info, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	info, ok := registry[id]
	return info, ok
}

// Role returns the IDs of the registered modules that belong to role, sorted.
func Role(role string) []string {
	var ids []string
	for _, info := range Registered() {
		for _, r := range info.Roles {
			if r == role {
				ids = append(ids, info.ID)
			}
		}
	}
	return ids
}
