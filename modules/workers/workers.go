// Package workers is the workers module: the WebSocket entry
// /v1/workers/connect (protocol orbit.workers.v1) through which workers lease
// tasks, report outcomes and keep their leases alive. The task state machine
// itself is the tasks module's store; this module is its transport.
package workers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/tasks"
)

func init() { modules.Register(&Module{}) }

// subprotocol is the WebSocket sub-protocol of the worker entry.
const subprotocol = "orbit.workers.v1"

// Defaults of the workers section.
const (
	defaultLeaseDuration     = 30 * time.Second
	defaultHeartbeatInterval = 15 * time.Second
	DefaultMaxConnections    = 128
	defaultHelloTimeout      = 5 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultPollInterval      = time.Second
	maxCapacity              = 32
)

// Config is the `workers` section.
type Config struct {
	// LeaseDuration is how long a task lease lasts without a worker.ping.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// HeartbeatInterval is how often workers are told to ping.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// MaxConnections bounds the worker connections of this node; more get
	// 429 CAPACITY_EXCEEDED before the upgrade.
	MaxConnections int `yaml:"max_connections"`
	// HelloTimeout is how long a new connection may take to send hello.
	HelloTimeout time.Duration `yaml:"hello_timeout"`
	// IdleTimeout closes a connection that sent no frame for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// PollInterval is how often a connection looks for work it was not
	// woken for (tasks submitted on other nodes, retry backoffs ending).
	PollInterval time.Duration `yaml:"poll_interval"`
}

// Tasks is what the workers module needs of the tasks module: the
// worker-side operations of the task store and its signals. The store
// announces its own commits, so the module never notifies: Submitted is
// closed after a task becomes PENDING on this node, CancelRequested after a
// cancel request. See tasks.Store for each method's contract.
type Tasks interface {
	WorkerSessionOpen(ctx context.Context, p *tasks.WorkerSessionOpenParams) (string, error)
	WorkerSessionClose(ctx context.Context, sessionID string) error
	WorkerSessionAdopt(ctx context.Context, sessionID string, proofs []tasks.Proof, leaseDuration time.Duration) ([]string, error)
	AttemptLease(ctx context.Context, sessionID string, grant auth.Grant, leaseDuration time.Duration) ([]tasks.Assignment, error)
	AttemptCompleteBatch(ctx context.Context, completions []*tasks.AttemptCompleteParams) ([]tasks.CompleteOutcome, error)
	AttemptRelease(ctx context.Context, p *tasks.Proof, reason string) (*tasks.Event, error)
	AttemptUnsent(ctx context.Context, a *tasks.Assignment, delay time.Duration) (*tasks.Event, error)
	AttemptRenew(ctx context.Context, sessionID string, leaseDuration time.Duration) (int, error)
	CancelRequestList(ctx context.Context, sessionID string) ([]tasks.Proof, error)
	Submitted() <-chan struct{}
	CancelRequested() <-chan struct{}
}

// Module is the workers module.
type Module struct {
	cfg    Config
	tasks  Tasks
	auth   auth.Authenticator
	entry  *wsx.Entry
	logger *slog.Logger
	// completes applies task.complete frames of every connection in shared
	// transactions.
	completes *batch.Batcher[*completeRequest]
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "workers",
		Requires: []string{"admin", "tasks"},
		Roles:    []string{"server"},
		New: func() modules.Module {
			return &Module{cfg: Config{
				LeaseDuration: defaultLeaseDuration, HeartbeatInterval: defaultHeartbeatInterval,
				MaxConnections: DefaultMaxConnections, HelloTimeout: defaultHelloTimeout,
				IdleTimeout: defaultIdleTimeout, PollInterval: defaultPollInterval,
			}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Validate checks the section and returns every problem.
func (m *Module) Validate() error {
	p := config.NewProblems("workers")
	p.Positive("lease_duration", m.cfg.LeaseDuration)
	p.Positive("heartbeat_interval", m.cfg.HeartbeatInterval)
	p.Positive("hello_timeout", m.cfg.HelloTimeout)
	p.Positive("idle_timeout", m.cfg.IdleTimeout)
	p.Positive("poll_interval", m.cfg.PollInterval)
	if m.cfg.HeartbeatInterval >= m.cfg.LeaseDuration {
		p.Add("heartbeat_interval", "must be shorter than lease_duration")
	}
	p.AtLeastOne("max_connections", m.cfg.MaxConnections)
	return p.Err()
}

// Provision connects the module to the tasks module and builds the entry.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	t, err := modules.Require[Tasks](env, "tasks")
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	m.tasks = t
	a, err := modules.Require[auth.Authenticator](env, "admin")
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	m.auth = a
	m.logger = env.Logger.With("module", "workers")
	m.completes = m.newCompleteBatcher()
	entry, err := wsx.NewEntry(wsx.Config{
		Subprotocol:  subprotocol,
		Permission:   auth.PermTasksWork,
		Authenticate: wsx.FromAuthenticator(m.auth),
		MaxConns:     m.cfg.MaxConnections,
		IdleTimeout:  m.cfg.IdleTimeout,
		HelloTimeout: m.cfg.HelloTimeout,
		Logger:       m.logger,
	})
	if err != nil {
		return err
	}
	m.entry = entry
	return nil
}

// Routes mounts the worker entry. The management deadline does not apply to
// a connection.
func (m *Module) Routes(r *mux.Router) {
	r.Handle("/v1/workers/connect", httpx.NoDeadline(http.HandlerFunc(m.connect)))
}

// Stop closes every worker connection (their leases stay in the database
// until they are completed or expire) and waits for them within ctx.
func (m *Module) Stop(ctx context.Context) error {
	if err := m.entry.Stop(ctx, m.completes.Wait); err != nil {
		return fmt.Errorf("workers: stop: %w", err)
	}
	return nil
}

var (
	_ modules.Configurer  = (*Module)(nil)
	_ modules.Validator   = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Router      = (*Module)(nil)
	_ modules.Stopper     = (*Module)(nil)

	_ Tasks = (*tasks.Module)(nil)
)
