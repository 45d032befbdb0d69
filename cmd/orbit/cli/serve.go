package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/modules"
)

func serveCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the server modules on one HTTP listener",
		Long: `Runs the server modules named by server.modules (default: every server module)
on one HTTP listener. The database schema must be current: pass --migrate (or set
database.migrate: true) to apply pending migrations first. SIGINT or SIGTERM stops
the server gracefully within server.shutdown_timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := app.LoadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return app.serve(ctx, cmd, cfg, nil, nil)
		},
	}
	cmd.Flags().String("listen", config.DefaultListen, "listen address host:port (server.listen)")
	cmd.Flags().String("metrics-listen", config.DefaultMetricsListen, "address host:port of GET /metrics, empty to disable (server.metrics_listen)")
	cmd.Flags().Bool("migrate", false, "apply pending migrations before serving (database.migrate)")
	app.flagKeys["server.listen"] = "listen"
	app.flagKeys["server.metrics_listen"] = "metrics-listen"
	app.flagKeys["database.migrate"] = "migrate"
	return cmd
}

// serve runs the server until ctx is cancelled or serving fails. It serves
// on ln, which serve closes, or, when ln is nil, on a listener of its own
// bound once the database is ready; likewise GET /metrics on mln or, when
// mln is nil and server.metrics_listen is set, on a listener of its own.
func (app *App) serve(ctx context.Context, cmd *cobra.Command, cfg *config.Config, ln, mln net.Listener) error {
	if ln != nil {
		defer ln.Close()
	}
	if mln != nil {
		defer mln.Close()
	}
	logger := newLogger(cfg, cmd.ErrOrStderr())
	gcPercent, gcSource := server.SetGCPercent(cfg.Server.GCPercent)
	logger.Debug("garbage collector target", "gc_percent", gcPercent, "source", gcSource)
	pool, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.Database.Migrate {
		applied, err := migrate.Up(ctx, pool, modules.Migrations())
		if err != nil {
			return err
		}
		for _, name := range applied {
			logger.Info("migration applied", "file", name)
		}
	}
	if err := migrate.Check(ctx, pool, modules.Migrations()); err != nil {
		if errors.Is(err, migrate.ErrBehind) {
			return fmt.Errorf("%w (run: orbit migrate up, or serve with --migrate)", err)
		}
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	v, _ := buildVersion(version, revision, bi)
	traces, err := tracing.Open(ctx, tracing.Config{
		OTLPEndpoint: cfg.Tracing.OTLPEndpoint, SampleRatio: cfg.Tracing.SampleRatio, ServiceVersion: v,
	})
	if err != nil {
		return err
	}
	defer func() {
		// The spans still buffered go out within their own bound, after
		// the server stopped making them.
		flushCtx, cancel := context.WithTimeout(context.Background(), tracesFlushTimeout)
		defer cancel()
		if err := traces.Shutdown(flushCtx); err != nil {
			logger.Warn("trace export at shutdown failed", "err", err)
		}
	}()
	srv, err := server.New(ctx, server.Params{Config: cfg, DB: pool, Logger: logger, Instances: app.instances, Tracing: traces.TracerProvider()})
	if err != nil {
		return err
	}
	if ln == nil {
		if ln, err = listen(cfg); err != nil {
			return err
		}
	}
	if mln == nil && cfg.Server.MetricsListen != "" {
		if mln, err = listenMetrics(cfg); err != nil {
			ln.Close()
			return err
		}
	}
	if err := srv.Start(ctx, ln); err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return err
	}
	if mln != nil {
		srv.ServeMetrics(mln)
		logger.Info("metrics on http://" + mln.Addr().String() + "/metrics")
		fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics\n", mln.Addr())
	}
	logger.Info(srv.Describe(ln.Addr().String()))
	fmt.Fprintf(cmd.OutOrStdout(), "orbit listening on %s\n", ln.Addr())
	waitErr := make(chan error, 1)
	go func() { waitErr <- srv.Wait() }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-waitErr:
	}
	logger.Info("orbit stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	return errors.Join(serveErr, srv.Stop(stopCtx))
}

// listenMetrics binds server.metrics_listen. When the address is taken or
// not allowed, the error is one line naming the address and how to choose
// another or disable metrics.
func listenMetrics(cfg *config.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Server.MetricsListen)
	if err != nil {
		reason := err.Error()
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			reason = opErr.Err.Error()
		}
		return nil, fmt.Errorf("cannot listen for metrics on %s (%s): choose another address with --metrics-listen or %s (server.metrics_listen), or set it empty to disable metrics",
			cfg.Server.MetricsListen, reason, config.EnvName("server.metrics_listen"))
	}
	return ln, nil
}

// tracesFlushTimeout bounds the export of the spans still buffered when
// the server stops.
const tracesFlushTimeout = 5 * time.Second

// listen binds server.listen. When the address is taken or not allowed,
// the error is one line naming the address and how to choose another.
func listen(cfg *config.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		reason := err.Error()
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			reason = opErr.Err.Error()
		}
		return nil, fmt.Errorf("cannot listen on %s (%s): choose another address with --listen or %s (server.listen)",
			cfg.Server.Listen, reason, config.EnvName("server.listen"))
	}
	return ln, nil
}
