// Package server assembles the HTTP server of `orbit serve`: the module host,
// the shared router with the HTTP kit's middleware, and the health endpoints.
package server

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/metrics"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/modules"
)

// healthTimeout bounds the database checks of /readyz.
const healthTimeout = 2 * time.Second

// readHeaderTimeout bounds the wait for a request's headers. The body is
// bounded by the request deadline (httpx.Middleware).
const readHeaderTimeout = 10 * time.Second

// Server is one orbit server node.
type Server struct {
	cfg     *config.Config
	db      *sql.DB
	logger  *slog.Logger
	host    *modules.Host
	router  *mux.Router
	handler http.Handler
	http    *http.Server
	serveCh chan error

	metrics     *metrics.Registry
	collector   *metrics.Collector
	unobserveDB func()
	metricsHTTP *http.Server
	metricsDone chan struct{}

	nodeID string
}

// Params are the inputs of New.
type Params struct {
	Config    *config.Config
	DB        *sql.DB
	Logger    *slog.Logger
	Instances modules.Instances
	// Tracing is the node's tracer provider; nil means tracing is off.
	Tracing trace.TracerProvider
}

// New provisions the modules named by cfg.Server.Modules (every server module
// when empty) and builds the router. Nothing runs until Start.
func New(ctx context.Context, p Params) (*Server, error) {
	ids := p.Config.Server.Modules
	if len(ids) == 0 {
		ids = modules.Role("server")
	}
	host, err := modules.NewHost(p.Instances, ids)
	if err != nil {
		return nil, err
	}
	reg := metrics.New()
	node, unobserve := newNodeMetrics(reg, p.DB)
	env := &modules.Env{Config: p.Config, DB: p.DB, Logger: p.Logger, Metrics: reg, Tracing: p.Tracing, NodeID: db.NewID()}
	if err := host.Provision(ctx, env); err != nil {
		unobserve()
		return nil, err
	}
	s := &Server{
		cfg: p.Config, db: p.DB, logger: p.Logger, host: host, metrics: reg, unobserveDB: unobserve, nodeID: env.NodeID,
		collector: metrics.NewCollector(reg, p.DB, p.Config.Metrics.RefreshInterval, p.Logger.With("module", "metrics")),
	}
	r := mux.NewRouter().SkipClean(true)
	r.NotFoundHandler = httpx.NotFound()
	r.MethodNotAllowedHandler = httpx.MethodNotAllowed()
	r.Handle("/healthz", http.HandlerFunc(s.healthz)).Methods(http.MethodGet)
	r.Handle("/readyz", http.HandlerFunc(s.readyz)).Methods(http.MethodGet)
	host.Routes(r)
	s.router = r
	s.handler = httpx.Middleware(httpx.MiddlewareOptions{
		Logger: p.Logger, Deadline: p.Config.Server.RequestDeadline, Observe: node.observe,
	}, r)
	return s, nil
}

// Handler returns the server's HTTP handler, for tests that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s.handler }

// Route is one route of the server: its path template, such as
// "/v1/tasks/{id}", and its methods (none for a route that takes any
// method, such as a WebSocket entry).
type Route struct {
	Path    string
	Methods []string
}

// Routes returns every route of the server, in the order they were added,
// for tests that must cover each one.
func (s *Server) Routes() []Route {
	var out []Route
	_ = s.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return nil // a route without a path matches on something else
		}
		methods, _ := route.GetMethods()
		out = append(out, Route{Path: path, Methods: methods})
		return nil
	})
	return out
}

// NodeID returns the node id of this run (modules.Env.NodeID).
func (s *Server) NodeID() string { return s.nodeID }

// Modules returns the IDs of the modules this server runs, in start order.
func (s *Server) Modules() []string { return s.host.IDs() }

// StartModules starts the modules' background work, and then the metrics
// collector, without listening.
func (s *Server) StartModules(ctx context.Context) error {
	if err := s.host.Start(ctx); err != nil {
		return err
	}
	s.collector.Start()
	return nil
}

// Start starts the modules and then serves HTTP on ln in the background. A
// failure to serve is reported by Wait.
func (s *Server) Start(ctx context.Context, ln net.Listener) error {
	if err := s.StartModules(ctx); err != nil {
		return err
	}
	s.http = s.HTTPServer()
	ln = s.Listener(ln)
	s.serveCh = make(chan error, 1)
	cert, key := s.cfg.Server.TLSCertFile, s.cfg.Server.TLSKeyFile
	go func() {
		var err error
		if cert != "" {
			s.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			err = s.http.ServeTLS(ln, cert, key)
		} else {
			err = s.http.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveCh <- err
	}()
	return nil
}

// HTTPServer returns an http.Server for the node's handler with its
// timeouts: headers within 10 seconds, keep-alive connections closed after
// server.idle_timeout. There is no ReadTimeout or WriteTimeout, which would
// also cut long-lived WebSocket connections; the body of a request is
// bounded by its deadline in httpx.Middleware instead. Start serves with
// it; tests may serve it themselves.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       s.cfg.Server.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
}

// Listener bounds ln to server.max_connections open connections,
// WebSocket connections included: once they are all open, new ones wait
// to be accepted until one closes. Start listens through it; tests may too.
func (s *Server) Listener(ln net.Listener) net.Listener {
	if s.cfg.Server.MaxConnections < 1 {
		// A config that skipped Validate; nothing to bound by.
		return ln
	}
	return newLimitListener(ln, s.cfg.Server.MaxConnections)
}

// Wait blocks until the HTTP server stops and returns why.
func (s *Server) Wait() error {
	if s.serveCh == nil {
		return nil
	}
	return <-s.serveCh
}

// Stop stops accepting requests, waits for running ones within ctx, then
// stops the metrics collector and the modules in reverse order, and last
// the metrics listener. It is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	var httpErr, metricsErr error
	if s.http != nil {
		httpErr = s.http.Shutdown(ctx)
	}
	collectorErr := s.collector.Stop(ctx)
	modErr := s.host.Stop(ctx)
	if s.metricsHTTP != nil {
		metricsErr = s.metricsHTTP.Shutdown(ctx)
		<-s.metricsDone
	}
	s.unobserveDB()
	return errors.Join(httpErr, collectorErr, modErr, metricsErr)
}

type health struct {
	Status string `json:"status"`
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if _, err := httpx.Query(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, http.StatusOK, health{Status: "ok"})
}

// readyz answers 200 when the database answers and its schema is current.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if _, err := httpx.Query(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		s.logger.WarnContext(ctx, "readyz: database unreachable", "err", err)
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeUnavailable, "database unreachable"))
		return
	}
	if err := migrate.Check(ctx, s.db, modules.Migrations()); err != nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeUnavailable, "schema is not current: %s", firstLine(err)))
		return
	}
	httpx.WriteData(w, r, http.StatusOK, health{Status: "ready"})
}

func firstLine(err error) string {
	msg := err.Error()
	for i, c := range msg {
		if c == '\n' {
			return msg[:i]
		}
	}
	return msg
}

// Describe is a one-line summary for the start-up log.
func (s *Server) Describe(addr string) string {
	return fmt.Sprintf("orbit serving on %s with modules %v", addr, s.host.IDs())
}
