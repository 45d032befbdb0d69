// Package tasks is the tasks module: task submission, cancel, review and
// query over HTTP, the task state machine with its leases, and the per-queue
// result log that every subscriber reads from (T-1 … T-11).
package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/bg"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/modules"
)

func init() { modules.Register(&Module{}) }

// Defaults of the tasks section.
const (
	defaultRetention         = 7 * 24 * time.Hour
	defaultRetentionInterval = time.Minute
	defaultRetentionBatch    = 1000
	defaultSweepInterval     = time.Second
	defaultSweepBatch        = 100
	defaultRetryBackoffMin   = time.Second
	defaultRetryBackoffMax   = time.Minute
)

// Config is the `tasks` section.
type Config struct {
	// Retention is how long result-log events are kept (T-11).
	Retention time.Duration `yaml:"retention"`
	// RetentionInterval is how often the retention sweeper runs.
	RetentionInterval time.Duration `yaml:"retention_interval"`
	// RetentionBatch bounds the events one purge transaction deletes.
	RetentionBatch int `yaml:"retention_batch"`
	// SweepInterval is how often expired task leases are recovered (T-6)
	// and events left in the result log's intake are sequenced (T-9).
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// SweepBatch bounds the leases one sweep transaction recovers.
	SweepBatch int `yaml:"sweep_batch"`
	// RetryBackoffMin and RetryBackoffMax bound the delay before a failed
	// idempotent task is offered again; it doubles with every attempt (T-7).
	RetryBackoffMin time.Duration `yaml:"retry_backoff_min"`
	RetryBackoffMax time.Duration `yaml:"retry_backoff_max"`
}

// Module is the tasks module.
type Module struct {
	cfg    Config
	store  *Store
	auth   auth.Authenticator
	audit  audit.Writer
	logger *slog.Logger
	tracer tracing.Tracer

	// holds are the modules of the run that keep result-log events from
	// retention (RetentionHold).
	holds []RetentionHold

	// submits records the submissions of POST /v1/tasks in shared
	// transactions (group commit).
	submits *batch.Batcher[*pendingSubmit]
	// submitKeys keeps two rounds of submits from recording one key at
	// once.
	submitKeys *submitKeys

	// stopObserving ends the timing of sequencing waits for the metrics.
	stopObserving func()

	loops bg.Group
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "tasks",
		Requires: []string{"admin"},
		Roles:    []string{"server"},
		New: func() modules.Module {
			return &Module{cfg: Config{
				Retention: defaultRetention, RetentionInterval: defaultRetentionInterval, RetentionBatch: defaultRetentionBatch,
				SweepInterval: defaultSweepInterval, SweepBatch: defaultSweepBatch,
				RetryBackoffMin: defaultRetryBackoffMin, RetryBackoffMax: defaultRetryBackoffMax,
			}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Validate checks the section and returns every problem.
func (m *Module) Validate() error {
	p := config.NewProblems("tasks")
	p.Positive("retention", m.cfg.Retention)
	p.Positive("retention_interval", m.cfg.RetentionInterval)
	p.Positive("sweep_interval", m.cfg.SweepInterval)
	p.Positive("retry_backoff_min", m.cfg.RetryBackoffMin)
	p.Positive("retry_backoff_max", m.cfg.RetryBackoffMax)
	if m.cfg.RetryBackoffMax < m.cfg.RetryBackoffMin {
		p.Add("retry_backoff_max", "must be at least retry_backoff_min")
	}
	p.AtLeastOne("retention_batch", m.cfg.RetentionBatch)
	p.AtLeastOne("sweep_batch", m.cfg.SweepBatch)
	return p.Err()
}

// Provision builds the store on the admin module's identity and audit log,
// and finds the modules that hold result-log events from retention.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	a, err := modules.Require[auth.Authenticator](env, "admin")
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	w, err := modules.Require[audit.Writer](env, "admin")
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	queues, err := modules.Require[QueueNamespaces](env, "admin")
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	identity, err := modules.Require[Identity](env, "admin")
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	m.auth, m.audit = a, w
	m.store = NewStore(env.DB, identity, m.cfg.RetryBackoffMin, m.cfg.RetryBackoffMax)
	m.store.metrics = newTaskMetrics(env.Metrics, queues)
	env.Metrics.Refresh(m.store.metrics)
	m.holds = modules.Offered[RetentionHold](env)
	m.logger = env.Logger.With("module", "tasks")
	m.tracer = tracing.NewTracer(env.Tracing, tracerName)
	m.submitKeys = newSubmitKeys()
	m.submits = m.newSubmitBatcher()
	return nil
}

// Store returns the module's store, for tests. Other modules get what they
// need of it as interfaces they declare (see offers.go).
func (m *Module) Store() *Store { return m.store }

// Routes mounts the task endpoints.
func (m *Module) Routes(r *mux.Router) { m.routes(r) }

// Start runs the lease sweeper and the retention sweeper until Stop, and
// times the writes' waits for sequencing on the node's pool for the
// metrics (orbit_result_sequencing_seconds).
func (m *Module) Start(context.Context) error {
	m.stopObserving = m.store.ObserveSequencing(m.store.metrics.sequenced)
	m.loops.Go(func(ctx context.Context) { bg.Every(ctx, m.cfg.SweepInterval, m.sweepLeases) })
	m.loops.Go(func(ctx context.Context) { bg.Every(ctx, m.cfg.SweepInterval, m.sweepIntake) })
	m.loops.Go(func(ctx context.Context) { bg.Every(ctx, m.cfg.RetentionInterval, m.sweepRetention) })
	return nil
}

// Stop stops the timing and the sweepers and waits for them, bounded by
// ctx.
func (m *Module) Stop(ctx context.Context) error {
	if m.stopObserving != nil {
		m.stopObserving()
	}
	if err := m.loops.Stop(ctx); err != nil {
		return fmt.Errorf("tasks: stop: %w", err)
	}
	return nil
}

// sweepLeases recovers expired leases until none is left (T-6).
func (m *Module) sweepLeases(ctx context.Context) {
	for ctx.Err() == nil {
		events, err := m.store.attemptRecover(ctx, m.cfg.SweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				m.logger.Warn("lease sweep failed", "err", err)
			}
			return
		}
		if len(events) == 0 {
			return
		}
		if len(events) < m.cfg.SweepBatch {
			return
		}
	}
}

// sweepIntake sequences events left in the result log's intake by a
// commit whose own sequencing failed, here or on a node that died between
// the two (T-9).
func (m *Module) sweepIntake(ctx context.Context) {
	if _, err := m.store.seq.sync(ctx, 0); err != nil && ctx.Err() == nil {
		m.logger.Warn("result log intake sweep failed", "err", err)
	}
}

// sweepRetention purges old events of every queue (T-11).
func (m *Module) sweepRetention(ctx context.Context) {
	queues, err := streamQueues(ctx, m.store.pool())
	if err != nil {
		if ctx.Err() == nil {
			m.logger.Warn("retention sweep failed", "err", err)
		}
		return
	}
	cutoff := db.Now().Add(-m.cfg.Retention)
	for _, q := range queues {
		for ctx.Err() == nil {
			n, err := EventPurge(ctx, m.store.pool(), &EventPurgeParams{QueueID: q, Cutoff: cutoff, Batch: m.cfg.RetentionBatch, Holds: m.holds})
			if err != nil {
				if ctx.Err() == nil {
					m.logger.Warn("retention purge failed", "queue_id", q, "err", err)
				}
				return
			}
			if n < m.cfg.RetentionBatch {
				break
			}
		}
	}
}

var (
	_ modules.Configurer  = (*Module)(nil)
	_ modules.Validator   = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Router      = (*Module)(nil)
	_ modules.Starter     = (*Module)(nil)
	_ modules.Stopper     = (*Module)(nil)
)
