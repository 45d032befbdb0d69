package server

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/metrics"
)

// nodeMetrics are the metrics the server itself records: its HTTP
// requests and its database pool.
type nodeMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

// newNodeMetrics registers the server's own metrics on reg and starts
// observing the transactions of pool; the returned function stops that.
func newNodeMetrics(reg *metrics.Registry, pool *sql.DB) (*nodeMetrics, func()) {
	m := &nodeMetrics{
		requests: reg.CounterVec("http_requests_total",
			"HTTP requests by route template and C-7 code (OK when answered without an error).", "route", "code"),
		seconds: reg.HistogramVec("http_request_seconds",
			"Time from an HTTP request's arrival to its response, by route template; WebSocket connections are not included.",
			metrics.Seconds, "route"),
	}
	txs := reg.CounterVec("db_transactions_total",
		"Database transaction attempts by outcome: commit, rollback, retried_deadlock (rolled back by a deadlock or lock wait and run again), commit_unknown (the connection failed during COMMIT).",
		"outcome")
	for _, o := range []string{db.TxCommit, db.TxRollback, db.TxRetriedDeadlock, db.TxCommitUnknown} {
		txs.WithLabelValues(o)
	}
	reg.GaugeFunc("db_pool_in_use", "Connections of the database pool in use.", nil,
		func() float64 { return float64(pool.Stats().InUse) })
	reg.GaugeFunc("db_pool_open", "Connections of the database pool open, in use or idle.", nil,
		func() float64 { return float64(pool.Stats().OpenConnections) })
	reg.CounterFunc("db_pool_wait_seconds_total", "Time spent waiting for a free connection of the database pool.", nil,
		func() float64 { return pool.Stats().WaitDuration.Seconds() })
	reg.CounterFunc("db_pool_waits_total", "Waits for a free connection of the database pool.", nil,
		func() float64 { return float64(pool.Stats().WaitCount) })
	if c := db.PoolConnector(pool); c != nil {
		reg.GaugeFunc("db_active_dsn", "Index of the DSN new database connections go to: 0 for database.dsn, n for database.failover_dsns[n-1].", nil,
			func() float64 { return float64(c.Active()) })
		reg.CounterFunc("db_dsn_switches_total", "Times new database connections moved to another DSN because a dial to the active one failed.", nil,
			func() float64 { return float64(c.Switches()) })
	}
	stop := db.ObserveTx(pool, func(outcome string) { txs.WithLabelValues(outcome).Inc() })
	return m, stop
}

// observe records one request.
func (m *nodeMetrics) observe(o httpx.RequestObservation) {
	m.requests.WithLabelValues(o.Route, string(o.Code)).Inc()
	if !o.Upgraded {
		m.seconds.WithLabelValues(o.Route).Observe(o.Duration.Seconds())
	}
}

// MetricsHandler returns the handler of the metrics listener: GET /metrics
// in the Prometheus text format, no credential, nothing else (O-1). A
// scrape reads memory only; it never queries the database.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	return mux
}

// ServeMetrics serves MetricsHandler on ln, the separate listener of
// server.metrics_listen, until Stop. A failure to serve is logged.
func (s *Server) ServeMetrics(ln net.Listener) {
	s.metricsHTTP = &http.Server{
		Handler:           s.MetricsHandler(),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       s.cfg.Server.IdleTimeout,
	}
	hs := s.metricsHTTP
	s.metricsDone = make(chan struct{})
	go func() {
		defer close(s.metricsDone)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Warn("metrics listener stopped", "err", err)
		}
	}()
}

// RefreshMetrics recomputes the database-backed gauges now, as the
// background collector does every metrics.refresh_interval, and returns
// what it cost. For tests and benchmarks.
func (s *Server) RefreshMetrics(ctx context.Context) (metrics.Cost, error) {
	return s.collector.Refresh(ctx)
}

// Metrics returns the node's registry, for tests that gather it.
func (s *Server) Metrics() *metrics.Registry { return s.metrics }
