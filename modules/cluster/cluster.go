// Package cluster is the cluster module: membership of the `orbit serve`
// nodes that share one database (N-3) and the relay of their wake-up
// signals between them (N-2).
//
// Every node registers a row in nodes and beats its heartbeat there with
// the database clock. Any node marks a node whose heartbeat is older than
// three of that node's intervals dead and, in the same transaction, closes
// its worker and event sessions; the leases they held expire as usual. A
// node that finds itself marked dead logs it, registers again and wakes its
// connections, which find their sessions closed and close with 1012 so that
// their clients reconnect.
//
// Modules raise wake-up signals (wake.Broadcast) after their own commits;
// those that other nodes' waiters need are offered as Signals. The module
// bumps this node's counter of a signal in node_signals after it was
// notified (at most one UPDATE per signal_interval), and polls the other
// nodes' counters, waking the local waiters of every signal whose counter
// moved. A relayed wake-up is not counted as a change (wake.Broadcast.Wake),
// so it is never published back. A node alone publishes nothing, and reads
// the table every signal_idle_max to find a node that joins.
//
// The module requires no other, and the host orders modules without a
// dependency between them by ID: it starts before events and workers and
// stops after them, once their connections have closed their sessions
// (TestN3_NodeRegistersAndHeartbeats holds that order).
package cluster

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/bg"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/wake"
	"github.com/orbitrun/orbit/modules"
)

func init() { modules.Register(&Module{}) }

// Defaults of the cluster section.
const (
	defaultHeartbeatInterval = time.Second
	defaultSignalInterval    = 10 * time.Millisecond
	defaultSignalIdleMax     = 50 * time.Millisecond
	// deadAfter is how many heartbeat intervals of a node may pass
	// without a heartbeat before another node marks it dead.
	deadAfter = 3
	// forgetAfter is how long stopped and dead nodes stay listed.
	forgetAfter = 24 * time.Hour
	// maxNodeName bounds node_name (nodes.name).
	maxNodeName = 255
)

// Config is the `cluster` section.
type Config struct {
	// NodeName names this node in `orbit cluster status`; the host name
	// when empty.
	NodeName string `yaml:"node_name"`
	// HeartbeatInterval is how often the node beats its heartbeat; after
	// three intervals without one, another node marks it dead.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// SignalInterval is how often the node reads the other nodes' signal
	// counters while they move, and the least time between two
	// publications of its own.
	SignalInterval time.Duration `yaml:"signal_interval"`
	// SignalIdleMax bounds the read interval once nothing moves: it
	// doubles from SignalInterval up to SignalIdleMax.
	SignalIdleMax time.Duration `yaml:"signal_idle_max"`
}

// Signal is a wake-up signal that waiters on every node need: Notify on
// one node wakes the broadcast's waiters on the others (with Wake).
type Signal struct {
	// Name is the signal's name on every node, "<module>.<what>" (at most
	// 64 ASCII characters).
	Name string
	// Broadcast is the module's signal.
	Broadcast *wake.Broadcast
	// Woken, when not nil, is woken instead of Broadcast when the signal
	// moved on another node: for a module whose local waiters are woken
	// more narrowly than the other nodes' (Broadcast then only publishes).
	Woken *wake.Broadcast
}

// woken returns the broadcast that the signal's waiters on this node wait
// on when another node raised it.
func (s Signal) woken() *wake.Broadcast {
	if s.Woken != nil {
		return s.Woken
	}
	return s.Broadcast
}

// Signaler is implemented by modules whose waiters on other nodes must
// hear of their commits, found with modules.Offered. ClusterSignals is
// called from Start on, once; it returns the module's broadcasts, which
// must stay the same for the life of the run.
type Signaler interface {
	ClusterSignals() []Signal
}

// Connections is implemented by modules that record their connections per
// node (the node_id of their session rows). The cluster module calls it on
// fresh, unprovisioned instances of every registered module, so that a node
// closes the sessions of a dead node whatever modules it runs itself and
// `orbit cluster status` counts them without a running server: the methods
// use only the Querier or transaction they are given.
type Connections interface {
	// ConnectionKind names the connections, "worker" or "event".
	ConnectionKind() string
	// ConnectionsOpen counts the open sessions (closed_at NULL) of each
	// of nodeIDs; nodes without any are absent.
	ConnectionsOpen(ctx context.Context, q db.Querier, nodeIDs []string) (map[string]int, error)
	// ConnectionsClose closes every open session of nodeID at at, in tx,
	// and returns how many it closed.
	ConnectionsClose(ctx context.Context, tx *sql.Tx, nodeID string, at time.Time) (int64, error)
}

// Module is the cluster module.
type Module struct {
	cfg    Config
	db     *sql.DB
	id     string
	name   string
	logger *slog.Logger

	signalers []Signaler
	// signals are the offered signals, by their order in signalers.
	signals []Signal
	conns   []Connections

	// peers is how many other live nodes the watcher saw last.
	peers atomic.Int64
	// registered is set once the node's row is written.
	registered atomic.Bool
	// published counts this node's publications, for tests.
	published atomic.Int64

	loops    bg.Group
	stopOnce sync.Once
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:    "cluster",
		Roles: []string{"server"},
		New: func() modules.Module {
			return &Module{cfg: Config{
				HeartbeatInterval: defaultHeartbeatInterval,
				SignalInterval:    defaultSignalInterval, SignalIdleMax: defaultSignalIdleMax,
			}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Validate checks the section and returns every problem.
func (m *Module) Validate() error {
	p := config.NewProblems("cluster")
	if utf8.RuneCountInString(m.cfg.NodeName) > maxNodeName || !utf8.ValidString(m.cfg.NodeName) {
		p.Add("node_name", "must be valid UTF-8 of at most %d characters", maxNodeName)
	}
	p.Positive("heartbeat_interval", m.cfg.HeartbeatInterval)
	p.Positive("signal_interval", m.cfg.SignalInterval)
	p.Positive("signal_idle_max", m.cfg.SignalIdleMax)
	if m.cfg.SignalIdleMax < m.cfg.SignalInterval {
		p.Add("signal_idle_max", "must be at least signal_interval")
	}
	return p.Err()
}

// Provision takes the node id the host gave the run and finds the modules
// that offer signals and record connections.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	if env.NodeID == "" {
		return fmt.Errorf("cluster: the host gave the run no node id")
	}
	m.db, m.id = env.DB, env.NodeID
	m.name = m.cfg.NodeName
	if m.name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("cluster: node_name: not set, and the host name is unknown: %w", err)
		}
		m.name = host
	}
	m.logger = env.Logger.With("module", "cluster", "node_id", m.id)
	m.signalers = modules.Offered[Signaler](env)
	m.conns = registeredConnections()
	return nil
}

// registeredConnections returns a fresh instance of every registered
// module that records connections per node.
func registeredConnections() []Connections {
	var out []Connections
	for _, info := range modules.Registered() {
		if c, ok := info.New().(Connections); ok {
			out = append(out, c)
		}
	}
	return out
}

// NodeID returns this node's id.
func (m *Module) NodeID() string { return m.id }

// Peers returns how many other live nodes this node saw at its last read
// of the signal counters. It is 0 until the first read.
func (m *Module) Peers() int { return int(m.peers.Load()) }

// Start registers the node and runs its heartbeat, reaper, publisher and
// watcher until Stop. The node's row is written by the heartbeat loop at
// once, and again on every beat until it succeeds.
func (m *Module) Start(context.Context) error {
	for _, s := range m.signalers {
		m.signals = append(m.signals, s.ClusterSignals()...)
	}
	kick := make(chan struct{}, 1)
	gens := make([]uint64, len(m.signals))
	for i, s := range m.signals {
		gens[i] = s.Broadcast.Gen()
		m.loops.Go(func(ctx context.Context) { forward(ctx, s.Broadcast, gens[i], kick) })
	}
	m.loops.Go(m.heartbeatLoop)
	m.loops.Go(func(ctx context.Context) { m.publishLoop(ctx, gens, kick) })
	m.loops.Go(m.watchLoop)
	return nil
}

// Stop stops the loops, then marks the node stopped and closes the
// sessions it still has open, in one transaction. It is idempotent, and
// does nothing to the database when the node never registered. When the
// database fails then, it logs a warning and returns nil: the other nodes
// mark the node dead after 3 heartbeat intervals, which closes the same
// sessions.
func (m *Module) Stop(ctx context.Context) error {
	if err := m.loops.Stop(ctx); err != nil {
		return fmt.Errorf("cluster: stop: %w", err)
	}
	m.stopOnce.Do(func() {
		if !m.registered.Load() {
			return
		}
		if err := nodeStop(ctx, m.db, m.id, m.conns); err != nil {
			m.logger.Warn("mark the node stopped failed; the other nodes will mark it dead", "err", err)
		}
	})
	return nil
}

var (
	_ modules.Configurer  = (*Module)(nil)
	_ modules.Validator   = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Starter     = (*Module)(nil)
	_ modules.Stopper     = (*Module)(nil)
	_ modules.Commander   = (*Module)(nil)
)
