// Package workers is the workers module: the WebSocket entry
// /v1/workers/connect (protocol orbit.workers.v1) through which workers lease
// tasks, report outcomes and keep their leases alive. The task state machine
// itself is the tasks module's store; this module is its transport.
package workers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/tasks"
)

func init() { modules.Register(&Module{}) }

// subprotocol is the WebSocket sub-protocol of the worker entry.
const subprotocol = "orbit.workers.v1"

// Defaults of the workers section.
const (
	defaultLeaseDuration  = 30 * time.Second
	DefaultMaxConnections = wsx.DefaultMaxConns
	// DefaultMaxConnectionsPerApp bounds one application's worker
	// connections across every node, for the reasons of
	// events.DefaultMaxConnectionsPerApp.
	DefaultMaxConnectionsPerApp = 2 * wsx.DefaultMaxConns
	defaultPollInterval         = time.Second
	maxCapacity                 = 32
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
	// MaxConnectionsPerApp bounds the worker connections of one application
	// (that of the credential) open at once across every node, counted in
	// the database (N-4); more are refused after their hello with
	// CAPACITY_EXCEEDED and close code 1013.
	MaxConnectionsPerApp int `yaml:"max_connections_per_app"`
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
	AttemptLease(ctx context.Context, sessionID string, grant auth.Grant, leaseDuration time.Duration) (assigned []tasks.Assignment, full bool, err error)
	AttemptCompleteBatch(ctx context.Context, completions []*tasks.AttemptCompleteParams) ([]tasks.CompleteOutcome, error)
	AttemptRelease(ctx context.Context, p *tasks.Proof, reason string) (*tasks.Event, error)
	AttemptUnsent(ctx context.Context, a *tasks.Assignment, delay time.Duration) (*tasks.Event, error)
	AttemptRenew(ctx context.Context, sessionID string, leaseDuration time.Duration) (int, error)
	CancelRequestList(ctx context.Context, sessionID string) ([]tasks.Proof, error)
	Submitted() <-chan struct{}
	SubmittedTo(queueID string) <-chan struct{}
	CancelRequested() <-chan struct{}
}

var _ Tasks = (*tasks.Module)(nil)

// Module is the workers module.
type Module struct {
	cfg   Config
	tasks Tasks
	auth  auth.Authenticator
	entry *wsx.Entry
	// Endpoint mounts the entry (Routes) and stops it (Stop).
	wsx.Endpoint
	logger *slog.Logger
	// nodeID is recorded with every session of this node.
	nodeID string
	tracer tracing.Tracer
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
				LeaseDuration: defaultLeaseDuration, HeartbeatInterval: wsx.DefaultHeartbeatInterval,
				MaxConnections: DefaultMaxConnections, MaxConnectionsPerApp: DefaultMaxConnectionsPerApp, HelloTimeout: wsx.DefaultHelloTimeout,
				IdleTimeout: wsx.DefaultIdleTimeout, PollInterval: defaultPollInterval,
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
	if m.cfg.MaxConnectionsPerApp < 1 {
		p.Add("max_connections_per_app", "must be at least 1, got %d; there is no unlimited setting, set a larger bound instead", m.cfg.MaxConnectionsPerApp)
	}
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
	m.nodeID = env.NodeID
	m.tracer = tracing.NewTracer(env.Tracing, tracerName)
	m.completes = m.newCompleteBatcher()
	m.entry, m.Endpoint, err = wsx.NewEndpoint("workers", "/v1/workers/connect", m.auth, m.logger, wsx.Config{
		Subprotocol:  subprotocol,
		Permission:   auth.PermTasksWork,
		MaxConns:     m.cfg.MaxConnections,
		IdleTimeout:  m.cfg.IdleTimeout,
		HelloTimeout: m.cfg.HelloTimeout,
	}, m.connect, m.completes.Wait)
	return err
}

var (
	_ modules.Configurer  = (*Module)(nil)
	_ modules.Validator   = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Router      = (*Module)(nil)
	_ modules.Stopper     = (*Module)(nil)
)
