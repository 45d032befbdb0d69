// Package events is the events module: the WebSocket entry
// /v1/events/connect (protocol orbit.events.v1, seed 001 §5–7) through which
// consumers receive leased deliveries of a subscription and acknowledge them
// with proofs. The delivery state machine is the subscriptions module's
// store; this module is its transport and the node's claim admission.
package events

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
	"github.com/orbitrun/orbit/modules/subscriptions"
)

func init() { modules.Register(&Module{}) }

// subprotocol is the WebSocket sub-protocol of the event entry.
const subprotocol = "orbit.events.v1"

// Defaults of the events section (seed 001 §5–7).
const (
	DefaultLeaseDuration  = 30 * time.Second
	DefaultMaxConnections = wsx.DefaultMaxConns
	// DefaultMaxConnectionsPerApp bounds one application's event
	// connections across every node: twice a node's default
	// max_connections, so that an application may fill a node of its own
	// and then some, while a connection leak or a reconnect loop of one
	// application cannot take every connection of a larger cluster. Each
	// connect counts the application's open sessions through an index, so
	// the bound also keeps that read small.
	DefaultMaxConnectionsPerApp = 2 * wsx.DefaultMaxConns
	DefaultClaimsInFlight       = 4
	DefaultClaimsPerApp         = 1
	defaultClaimsQueued         = 128
	defaultClaimsPerRound       = 4
	DefaultPollInterval         = time.Second
	maxCapacity                 = 32
	claimRecoverBatch           = 32
	claimTimeout                = 8 * time.Second
)

// Config is the `events` section.
type Config struct {
	// LeaseDuration is how long a delivery lease lasts, and how far an
	// event.extend without extend_ms extends it.
	LeaseDuration time.Duration `yaml:"lease_duration"`
	// MaxLeaseExtension bounds event.extend's extend_ms (K-1).
	MaxLeaseExtension time.Duration `yaml:"max_lease_extension"`
	// HeartbeatInterval is how often consumers are told to send events.ping,
	// and how often a connection re-checks its credential on its own.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// MaxConnections bounds the event connections of this node; more get 429
	// CAPACITY_EXCEEDED with Retry-After: 1 before the upgrade.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerApp bounds the event connections of one application
	// (that of the credential) open at once across every node, counted in
	// the database (N-4); more are refused after their hello with
	// CAPACITY_EXCEEDED and close code 1013.
	MaxConnectionsPerApp int `yaml:"max_connections_per_app"`
	// HelloTimeout is how long a new connection may take to send hello.
	HelloTimeout time.Duration `yaml:"hello_timeout"`
	// IdleTimeout closes a connection that sent no valid frame for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds every write to a connection.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// ReadQueue and WriteQueue bound the frames buffered per connection.
	ReadQueue  int `yaml:"read_queue"`
	WriteQueue int `yaml:"write_queue"`
	// ClaimsInFlight bounds the claim transactions running on this node,
	// ClaimsPerApp those of one application, ClaimsQueued those waiting or
	// running, and ClaimsPerRound those started per scheduling round.
	ClaimsInFlight int `yaml:"claims_in_flight"`
	ClaimsPerApp   int `yaml:"claims_per_app"`
	ClaimsQueued   int `yaml:"claims_queued"`
	ClaimsPerRound int `yaml:"claims_per_round"`
	// PollInterval is how often a connection claims without being woken,
	// for deliveries made claimable on other nodes.
	PollInterval time.Duration `yaml:"poll_interval"`
}

// Deliveries is what the events module needs of the subscriptions module:
// the delivery state machine that event connections drive, and its signal.
// It is declared here, by the module that needs it; the subscriptions
// module offers it (modules.Require). See the subscriptions package for each
// method's contract.
type Deliveries interface {
	EventSessionOpen(ctx context.Context, p *subscriptions.EventSessionOpenParams) (string, error)
	EventSessionClose(ctx context.Context, sessionID string) error
	SubscriptionGet(ctx context.Context, id string) (*subscriptions.Subscription, error)
	// RedeliveryHorizon is the lowest sequence of a queue's log that can
	// ever be delivered again (K-12).
	RedeliveryHorizon(ctx context.Context, queueID string) (uint64, error)
	// DeliveryMaterialize materialises one batch of the subscription's log.
	DeliveryMaterialize(ctx context.Context, subscriptionID string) (created int, more bool, err error)
	DeliveryClaim(ctx context.Context, p *subscriptions.DeliveryClaimParams) (leases []subscriptions.Lease, full bool, err error)
	DeliveryAckBatch(ctx context.Context, acks []*subscriptions.DeliveryAckParams) ([]subscriptions.AckOutcome, error)
	DeliveryControlBatch(ctx context.Context, requests []*subscriptions.DeliveryControlParams) ([]subscriptions.ControlOutcome, error)
	DeliveryUnsent(ctx context.Context, l *subscriptions.Lease, delay time.Duration) (bool, error)
	// Claimable returns a channel closed when deliveries of any
	// subscription may have become claimable on this node, ClaimableFor
	// one closed when a sequencing pass of this node created deliveries
	// of the subscription.
	Claimable() <-chan struct{}
	ClaimableFor(subscriptionID string) <-chan struct{}
	// RoomFreed tells the background materialiser that ACKs made room in
	// the backlogs of these subscriptions, named once per acknowledged
	// delivery.
	RoomFreed(subscriptionIDs []string)
	// DeliveryOutcome counts committed delivery outcomes
	// (orbit_deliveries_total).
	DeliveryOutcome(subscriptionID, namespaceID, outcome string, n int)
}

var _ Deliveries = (*subscriptions.Module)(nil)

// Module is the events module.
type Module struct {
	cfg   Config
	subs  Deliveries
	auth  auth.Authenticator
	entry *wsx.Entry
	// Endpoint mounts the entry (Routes) and stops it (Stop).
	wsx.Endpoint
	pool *claimPool
	acks *batch.Batcher[*ackRequest]
	// controls records extensions, NACKs and rejects as acks records ACKs.
	controls *batch.Batcher[*controlRequest]
	logger   *slog.Logger
	metrics  *eventMetrics
	tracer   tracing.Tracer
	// nodeID is recorded with every session of this node.
	nodeID string
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "events",
		Requires: []string{"admin", "subscriptions"},
		Roles:    []string{"server"},
		New: func() modules.Module {
			return &Module{cfg: Config{
				LeaseDuration: DefaultLeaseDuration, MaxLeaseExtension: DefaultMaxLeaseExtension, HeartbeatInterval: wsx.DefaultHeartbeatInterval,
				MaxConnections: DefaultMaxConnections, MaxConnectionsPerApp: DefaultMaxConnectionsPerApp, HelloTimeout: wsx.DefaultHelloTimeout,
				IdleTimeout: wsx.DefaultIdleTimeout, WriteTimeout: wsx.DefaultWriteTimeout,
				ReadQueue: wsx.DefaultInboundQueue, WriteQueue: wsx.DefaultOutboundQueue,
				ClaimsInFlight: DefaultClaimsInFlight, ClaimsPerApp: DefaultClaimsPerApp,
				ClaimsQueued: defaultClaimsQueued, ClaimsPerRound: defaultClaimsPerRound,
				PollInterval: DefaultPollInterval,
			}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Validate checks the section and returns every problem.
func (m *Module) Validate() error {
	p := config.NewProblems("events")
	p.Positive("lease_duration", m.cfg.LeaseDuration)
	p.Positive("max_lease_extension", m.cfg.MaxLeaseExtension)
	if m.cfg.MaxLeaseExtension < m.cfg.LeaseDuration {
		p.Add("max_lease_extension", "must be at least lease_duration")
	}
	p.Positive("heartbeat_interval", m.cfg.HeartbeatInterval)
	p.Positive("hello_timeout", m.cfg.HelloTimeout)
	p.Positive("idle_timeout", m.cfg.IdleTimeout)
	p.Positive("write_timeout", m.cfg.WriteTimeout)
	p.Positive("poll_interval", m.cfg.PollInterval)
	p.AtLeastOne("max_connections", m.cfg.MaxConnections)
	if m.cfg.MaxConnectionsPerApp < 1 {
		p.Add("max_connections_per_app", "must be at least 1, got %d; there is no unlimited setting, set a larger bound instead", m.cfg.MaxConnectionsPerApp)
	}
	p.AtLeastOne("read_queue", m.cfg.ReadQueue)
	p.AtLeastOne("write_queue", m.cfg.WriteQueue)
	p.AtLeastOne("claims_in_flight", m.cfg.ClaimsInFlight)
	p.AtLeastOne("claims_per_app", m.cfg.ClaimsPerApp)
	p.AtLeastOne("claims_queued", m.cfg.ClaimsQueued)
	p.AtLeastOne("claims_per_round", m.cfg.ClaimsPerRound)
	if m.cfg.HeartbeatInterval >= m.cfg.IdleTimeout {
		p.Add("heartbeat_interval", "must be shorter than idle_timeout")
	}
	return p.Err()
}

// Provision connects the module to the subscriptions module's deliveries
// and builds the entry and the claim pool.
func (m *Module) Provision(_ context.Context, env *modules.Env) error {
	s, err := modules.Require[Deliveries](env, "subscriptions")
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	m.subs = s
	a, err := modules.Require[auth.Authenticator](env, "admin")
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	m.auth = a
	m.logger = env.Logger.With("module", "events")
	m.nodeID = env.NodeID
	m.tracer = tracing.NewTracer(env.Tracing, tracerName)
	m.acks = newAckBatcher(s, s.RoomFreed)
	m.controls = newControlBatcher(s)
	m.pool = newClaimPool(m.cfg.ClaimsInFlight, m.cfg.ClaimsPerApp, m.cfg.ClaimsQueued, m.cfg.ClaimsPerRound)
	m.metrics = newEventMetrics(env.Metrics, m.pool)
	m.entry, m.Endpoint, err = wsx.NewEndpoint("events", "/v1/events/connect", m.auth, m.logger, wsx.Config{
		Subprotocol:   subprotocol,
		Permission:    auth.PermEventsConsume,
		MaxConns:      m.cfg.MaxConnections,
		InboundQueue:  m.cfg.ReadQueue,
		OutboundQueue: m.cfg.WriteQueue,
		WriteTimeout:  m.cfg.WriteTimeout,
		IdleTimeout:   m.cfg.IdleTimeout,
		HelloTimeout:  m.cfg.HelloTimeout,
		Metrics:       env.Metrics,
	}, m.connect, m.waitBatches)
	return err
}

var (
	_ modules.Configurer  = (*Module)(nil)
	_ modules.Validator   = (*Module)(nil)
	_ modules.Provisioner = (*Module)(nil)
	_ modules.Router      = (*Module)(nil)
	_ modules.Stopper     = (*Module)(nil)
)
