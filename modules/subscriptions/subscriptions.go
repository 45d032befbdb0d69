// Package subscriptions is the subscriptions module: the management API of
// seed 001 §1–4 (create, list, get, configure; deliveries, detail, retry),
// the materialiser that turns a queue's result log into deliveries, and the
// delivery state machine (claim, recovery, ACK) that the events module
// drives over its WebSocket.
package subscriptions

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/audit"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/bg"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/wake"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/tasks"
)

func init() { modules.Register(&Module{}) }

// Defaults of the subscriptions section.
const (
	defaultMaterializeInterval = time.Second
	defaultRecoverInterval     = time.Second
	defaultRecoverBatch        = 100
	defaultNoConsumerAfter     = 15 * time.Second
	purgeInterval              = 10 * time.Second
)

// Config is the `subscriptions` section.
type Config struct {
	// MaterializeInterval is how often the background materialiser looks
	// for subscriptions behind their queue's head, besides being woken
	// for those that results committed on this node left behind and for
	// the backlogs that ACKs on this node made room in.
	MaterializeInterval time.Duration `yaml:"materialize_interval"`
	// MaterializeBatch bounds the events one materialisation transaction
	// scans.
	MaterializeBatch int `yaml:"materialize_batch"`
	// RecoverInterval is how often the background sweeper recovers expired
	// delivery leases (claims recover their own subscription's as well).
	RecoverInterval time.Duration `yaml:"recover_interval"`
	// RecoverBatch bounds the leases one recovery transaction handles.
	RecoverBatch int `yaml:"recover_batch"`
	// NoConsumerAfter is how long a subscription with PENDING deliveries
	// may have no connected consumer before it shows blocked_reason
	// NO_CONSUMER: one heartbeat interval of the event connections.
	NoConsumerAfter time.Duration `yaml:"no_consumer_after"`
}

// Log is what the subscriptions module needs of the tasks module: reads of
// a queue's result log and its "appended" signal. It is declared here, by
// the module that needs it, and the tasks module offers it (modules.Require):
// tasks does not know its readers. The methods taking a Querier run in the
// caller's transaction when given one, so that a materialisation or a claim
// reads the log and writes deliveries in one transaction. See tasks.Store
// for each method's contract.
type Log interface {
	StreamGet(ctx context.Context, q tasks.Querier, queueID string) (tasks.Stream, error)
	StreamHeads(ctx context.Context, q tasks.Querier, queueIDs []string) (map[string]uint64, error)
	EventScan(ctx context.Context, q tasks.Querier, queueID string, after uint64, limit int) ([]tasks.EventRef, error)
	EventsBySequence(ctx context.Context, q tasks.Querier, queueID string, sequences []uint64) (map[uint64]tasks.Event, error)
	EventGet(ctx context.Context, q tasks.Querier, queueID, eventID string) (tasks.Event, error)
	// OnSequenced adds a hook that every sequencing pass of the result
	// log runs in its transaction, until remove is called.
	OnSequenced(h tasks.SequencedHook) (remove func())
}

// Module is the subscriptions module.
type Module struct {
	cfg    Config
	db     *sql.DB
	auth   auth.Authenticator
	apps   auth.ApplicationLocker
	audit  audit.Writer
	log    Log
	logger *slog.Logger

	// wake asks the background materialiser to look at every subscription
	// now.
	wake wake.Broadcast
	// roomFreed asks it to look at the subscriptions in freed, whose
	// backlogs ACKs on this node made room in, once ackWakeSpacing has
	// passed since its last run began.
	roomFreed wake.Broadcast
	freed     freedRoom
	// claimable wakes event connections so that they claim without
	// waiting for a poll: those of the subscriptions a sequencing pass
	// created deliveries for (Notify; a key per subscription waited on,
	// dropped when it is deleted through this node), or all of them when
	// deliveries of any subscription may have become claimable
	// (NotifyAll: recovered, retried, materialised by the materialiser).
	// Other nodes wake all theirs (ClusterSignals).
	claimable wake.Scoped
	// floors are where this node's claims look up PENDING deliveries
	// from; madePending forgets them.
	floors claimFloors
	// purge asks the purger of deleted subscriptions' deliveries to run.
	purge wake.Broadcast

	// metrics counts delivery outcomes and refreshes the subscription
	// gauges.
	metrics *deliveryMetrics
	// activity counts this node's deliveries and ACKs per minute.
	activity *activity

	// stopSequenced removes the hook Start gave the result log's
	// sequencing passes.
	stopSequenced func()

	loops bg.Group
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "subscriptions",
		Requires: []string{"admin", "tasks"},
		Roles:    []string{"server"},
		New: func() modules.Module {
			return &Module{cfg: Config{
				MaterializeInterval: defaultMaterializeInterval, MaterializeBatch: DefaultMaterializeBatch,
				RecoverInterval: defaultRecoverInterval, RecoverBatch: defaultRecoverBatch,
				NoConsumerAfter: defaultNoConsumerAfter,
			}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Validate checks the section and returns every problem.
func (m *Module) Validate() error {
	p := config.NewProblems("subscriptions")
	p.Positive("materialize_interval", m.cfg.MaterializeInterval)
	p.Positive("recover_interval", m.cfg.RecoverInterval)
	p.Positive("no_consumer_after", m.cfg.NoConsumerAfter)
	p.AtLeastOne("materialize_batch", m.cfg.MaterializeBatch)
	p.AtLeastOne("recover_batch", m.cfg.RecoverBatch)
	return p.Err()
}

// Provision connects the module to the tasks module's result log. Events
// with live deliveries are kept from retention through RetentionHeld,
// which the tasks module finds by itself.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	log, err := modules.Require[Log](env, "tasks")
	if err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	m.log = log
	m.db = env.DB
	a, err := modules.Require[auth.Authenticator](env, "admin")
	if err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	m.auth = a
	if m.apps, err = modules.Require[auth.ApplicationLocker](env, "admin"); err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	if m.audit, err = modules.Require[audit.Writer](env, "admin"); err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	m.logger = env.Logger.With("module", "subscriptions")
	m.metrics = newDeliveryMetrics(env.Metrics, env.DB, log, m.cfg.NoConsumerAfter)
	m.activity = newActivity()
	env.Metrics.Refresh(m.metrics)
	return nil
}

// sequenced is the hook of the result log's sequencing passes: the events
// a pass appends are materialised in its transaction (materializeAppended),
// the event connections of the subscriptions it created deliveries for are
// woken once it commits (other nodes' all are), and the background
// materialiser runs then only when the pass left subscriptions behind.
func (m *Module) sequenced(ctx context.Context, tx *sql.Tx, appended []tasks.Appended) error {
	filled, leftBehind, err := materializeAppended(ctx, tx, appended)
	if err != nil {
		return fmt.Errorf("subscriptions: materialize appended events: %w", err)
	}
	if len(filled) > 0 {
		db.OnCommit(tx, func() { m.claimable.Notify(filled...) })
	}
	if leftBehind {
		db.OnCommit(tx, m.wake.Notify)
	}
	return nil
}

// Routes mounts the management endpoints.
func (m *Module) Routes(r *mux.Router) { m.routes(r) }

// Start gives the result log's sequencing passes the hook that
// materialises what they append, and runs the background materialiser, the
// lease sweeper and the purger of deleted subscriptions' deliveries until
// Stop.
func (m *Module) Start(context.Context) error {
	m.stopSequenced = m.log.OnSequenced(m.sequenced)
	m.loops.Go(m.materializeLoop)
	m.loops.Go(func(ctx context.Context) { bg.Every(ctx, m.cfg.RecoverInterval, m.recoverExpired) })
	m.loops.Go(m.purgeLoop)
	return nil
}

// Stop stops the background work and waits for it, bounded by ctx.
func (m *Module) Stop(ctx context.Context) error {
	if m.stopSequenced != nil {
		// Passes of this pool after the stop (a server that follows this
		// one, in tests) must not materialise for this module, whose
		// claimable signal nobody waits on any more.
		m.stopSequenced()
		m.stopSequenced = nil
	}
	if err := m.loops.Stop(ctx); err != nil {
		return fmt.Errorf("subscriptions: stop: %w", err)
	}
	return nil
}

// materializeLoop keeps deliveries materialised so that the management API
// shows them without a connected consumer. Sequencing passes materialise
// what they append themselves and wake it only for the subscriptions they
// left behind (sequenced); ACKs wake it for the backlogs they made room in;
// it polls for the rest (results of other nodes, ACKs on other nodes).
func (m *Module) materializeLoop(ctx context.Context) {
	ticker := time.NewTicker(m.cfg.MaterializeInterval)
	defer ticker.Stop()
	onError := func(id string, err error) {
		if err != ErrHistoryExpired && err != ErrSubscriptionDeleted {
			m.logger.Warn("materialize", "subscription_id", id, "err", err)
		}
	}
	everyone := true
	for ctx.Err() == nil {
		woken, freed := m.wake.C(), m.roomFreed.C()
		ran := time.Now()
		// A look at every subscription covers those ACKs freed room in,
		// and is cheaper than naming very many.
		ids := m.freed.take(everyone)
		var n int
		var err error
		if everyone || len(ids) > maxFreedLookup {
			n, err = deliveryMaterializeAll(ctx, m.db, m.log, m.cfg.MaterializeBatch, &m.freed, onError)
		} else {
			n, err = deliveryMaterializeFreed(ctx, m.db, m.log, ids, m.cfg.MaterializeBatch, &m.freed, onError)
		}
		if err != nil && ctx.Err() == nil {
			m.logger.Warn("materialize", "err", err)
		}
		if n > 0 {
			m.claimable.NotifyAll()
		}
		everyone = true
		select {
		case <-ctx.Done():
		case <-woken:
		case <-ticker.C:
		case <-freed:
			// ACK batches free room one after another while a backlog
			// drains. Runs woken that way start at least ackWakeSpacing
			// apart, each taking the room several batches freed; a wake
			// for every subscription starts one at once.
			select {
			case <-ctx.Done():
			case <-woken:
			case <-time.After(ackWakeSpacing - time.Since(ran)):
				everyone = false
			}
		}
	}
}

// ackWakeSpacing is the least time between two runs of the materialiser
// woken by ACKs.
const ackWakeSpacing = 10 * time.Millisecond

// maxFreedLookup bounds the subscriptions a run woken by ACKs looks up by
// id; with more, it looks at every subscription.
const maxFreedLookup = 500

// freedRoom counts, from the ACK batches of many goroutines, the
// deliveries ACKs took out of each subscription's backlog since the
// materialiser last refilled it, for the materialiser to take those worth
// a refill. A refill counts the whole backlog under the subscription's
// lock (up to max_pending index entries) to create as many deliveries as
// were freed: refilled after every ACK batch, a draining backlog of 1,000
// cost its database about as much time counting as creating deliveries.
// A subscription is worth a refill once an eighth of its max_pending is
// free, so a full backlog keeps seven eighths of it meanwhile, or once one
// delivery is free while the materialiser has not learnt its max_pending.
type freedRoom struct {
	mu     sync.Mutex
	counts map[string]int // freed since the last refill
	worth  map[string]int // freed deliveries worth a refill
}

// refillEvery is the share of max_pending worth a refill.
const refillEvery = 8

// add counts a freed delivery for each id (an id once per delivery) and
// reports whether a subscription is now worth a refill.
func (f *freedRoom) add(ids []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	ready := false
	for _, id := range ids {
		f.counts[id]++
		ready = ready || f.counts[id] >= max(1, f.worth[id])
	}
	return ready
}

// take returns, sorted, the subscriptions worth a refill and forgets what
// was freed in them; with all, it forgets every count (the caller refills
// every subscription) and returns nothing.
func (f *freedRoom) take(all bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if all {
		clear(f.counts)
		return nil
	}
	var ids []string
	for id, n := range f.counts {
		if n >= max(1, f.worth[id]) {
			ids = append(ids, id)
			delete(f.counts, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// learn records the max_pending of a subscription the materialiser ran.
func (f *freedRoom) learn(id string, maxPending int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.worth == nil {
		f.worth = map[string]int{}
	}
	f.worth[id] = maxPending / refillEvery
}

// forget drops what is kept for a deleted subscription.
func (f *freedRoom) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.counts, id)
	delete(f.worth, id)
}

// purgeLoop removes the deliveries of deleted subscriptions in bounded
// batches (K-11), woken by deletions on this node and otherwise every
// purgeInterval, for those of other nodes and for work left by a stop.
func (m *Module) purgeLoop(ctx context.Context) {
	ticker := time.NewTicker(purgeInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		woken := m.purge.C()
		if _, err := deliveryPurge(ctx, m.db, DefaultPurgeBatch); err != nil && ctx.Err() == nil {
			m.logger.Warn("purge deleted subscriptions", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-woken:
		case <-ticker.C:
		}
	}
}

// recoverExpired recovers expired delivery leases of every subscription,
// with the same transitions a claim applies (S-22).
func (m *Module) recoverExpired(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := DeliveryRecover(withMetrics(ctx, m.metrics), m.db, "", m.cfg.RecoverBatch)
		if err != nil {
			if ctx.Err() == nil {
				m.logger.Warn("recover delivery leases", "err", err)
			}
			return
		}
		if n > 0 {
			m.floors.forgetAll()
			m.claimable.NotifyAll()
		}
		if n < m.cfg.RecoverBatch {
			return
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

	_ Log                 = (*tasks.Module)(nil)
	_ tasks.RetentionHold = (*Module)(nil)
)
