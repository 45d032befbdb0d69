package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/bg"
)

// DefaultRefreshInterval is how often the Collector refreshes the gauges
// that need the database (metrics.refresh_interval).
const DefaultRefreshInterval = 10 * time.Second

// refreshTimeout bounds one refresh, so that a stuck database never piles
// refreshes up.
const refreshTimeout = 30 * time.Second

// Refresher is implemented by modules with gauges computed from the
// database. RefreshMetrics reads through q, which counts the statements it
// runs, and sets the module's Snapshot gauges. It is called by the node's
// one Collector, never by a scrape, one call at a time; its statements must
// be bounded and index-backed, since it runs every refresh interval on
// every node.
type Refresher interface {
	RefreshMetrics(ctx context.Context, q *Querier) error
}

// Refresh adds a refresher to the node's Collector. Modules call it from
// Provision; on a nil Registry it does nothing.
func (r *Registry) Refresh(f Refresher) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshers = append(r.refreshers, f)
}

func (r *Registry) refresherList() []Refresher {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Refresher(nil), r.refreshers...)
}

// Querier is the database as a Refresher sees it: a pool that counts the
// statements run through it, for the Collector's own cost metric, and
// keeps them, so that tests can EXPLAIN what a refresh runs.
type Querier struct {
	db      *sql.DB
	queries atomic.Int64

	mu         sync.Mutex
	statements []Statement
}

// Statement is one statement a Refresher ran, with its arguments.
type Statement struct {
	Query string
	Args  []any
}

func (q *Querier) record(query string, args []any) {
	q.queries.Add(1)
	q.mu.Lock()
	q.statements = append(q.statements, Statement{Query: query, Args: args})
	q.mu.Unlock()
}

// Statements returns the statements run through q, in order.
func (q *Querier) Statements() []Statement {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Statement(nil), q.statements...)
}

// NewQuerier returns a Querier on pool, for tests and benchmarks that run
// a refresher themselves.
func NewQuerier(pool *sql.DB) *Querier { return &Querier{db: pool} }

// QueryContext runs a query and counts it.
func (q *Querier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	q.record(query, args)
	return q.db.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a single-row query and counts it.
func (q *Querier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	q.record(query, args)
	return q.db.QueryRowContext(ctx, query, args...)
}

// Queries returns how many statements ran through q.
func (q *Querier) Queries() int64 { return q.queries.Load() }

// Collector is the node's one background refresher of database-backed
// gauges (O-3): every interval it runs each Refresher of the registry in
// turn, and records its own cost as metrics: the statements and seconds of
// the last refresh, and the failed refreshes.
type Collector struct {
	reg      *Registry
	db       *sql.DB
	interval time.Duration
	logger   *slog.Logger

	queries  prometheus.Gauge
	seconds  prometheus.Histogram
	last     prometheus.Gauge
	failures prometheus.Counter

	loop bg.Group
}

// NewCollector returns the Collector of reg on pool. Nothing runs until
// Start.
func NewCollector(reg *Registry, pool *sql.DB, interval time.Duration, logger *slog.Logger) *Collector {
	if interval <= 0 {
		interval = DefaultRefreshInterval
	}
	return &Collector{
		reg: reg, db: pool, interval: interval, logger: logger,
		queries: reg.Gauge("metrics_refresh_queries", "Database statements the last refresh of the database-backed gauges ran."),
		seconds: reg.Histogram("metrics_refresh_seconds", "Duration of each refresh of the database-backed gauges.", Seconds),
		last:    reg.Gauge("metrics_refresh_last_success_timestamp_seconds", "Unix time of the last refresh that completed."),
		failures: reg.Counter("metrics_refresh_failures_total",
			"Refreshes of the database-backed gauges that failed; the gauges keep their previous values."),
	}
}

// Start refreshes at once and then every interval, in a goroutine the
// Collector owns until Stop.
func (c *Collector) Start() {
	c.loop.Go(func(ctx context.Context) {
		c.refreshLogged(ctx)
		bg.Every(ctx, c.interval, c.refreshLogged)
	})
}

// Stop stops the refreshes and waits for the one running, within ctx. It
// is idempotent and safe without Start.
func (c *Collector) Stop(ctx context.Context) error {
	if err := c.loop.Stop(ctx); err != nil {
		return fmt.Errorf("metrics: stop: %w", err)
	}
	return nil
}

func (c *Collector) refreshLogged(ctx context.Context) {
	if _, err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
		c.logger.Warn("metrics refresh failed", "err", err)
	}
}

// Cost is what one refresh took, and the statements it ran.
type Cost struct {
	Queries    int64
	Duration   time.Duration
	Statements []Statement
}

// Refresh runs every refresher once, records the cost and returns it with
// the errors of the refreshers that failed (the others still ran). Start
// calls it; tests and benchmarks may call it directly.
func (c *Collector) Refresh(ctx context.Context) (Cost, error) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	q := NewQuerier(c.db)
	start := time.Now()
	var errs []error
	for _, f := range c.reg.refresherList() {
		if err := f.RefreshMetrics(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	cost := Cost{Queries: q.Queries(), Duration: time.Since(start), Statements: q.Statements()}
	c.queries.Set(float64(cost.Queries))
	c.seconds.Observe(cost.Duration.Seconds())
	if err := errors.Join(errs...); err != nil {
		c.failures.Inc()
		return cost, fmt.Errorf("metrics: refresh: %w", err)
	}
	c.last.Set(float64(time.Now().UnixNano()) / 1e9)
	return cost, nil
}
