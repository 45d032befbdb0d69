package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/mysqld"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
)

// Defaults of `orbit dev`.
const (
	devStateDir = ".local"
	devDatabase = "orbit"
	// devReceiverDatabase is an empty database on the same local server for
	// the result-inbox receiver, which must never use the platform database.
	devReceiverDatabase = "receiver_example"
	devCredentialsFile  = "dev.credentials.json"
	// devDSNFile holds the local database's DSN while `orbit dev` runs, so
	// that other orbit commands started from the same directory find it.
	devDSNFile = "dev.dsn"
	// devPortFile remembers the local database's TCP port, so that a DSN
	// exported from one run (ORBIT_RECEIVER_DSN) still works after a
	// restart.
	devPortFile     = "mysql.port"
	devStartTimeout = 90 * time.Second
)

func devCommand(app *App) *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local database, migrate, write dev credentials and serve (one command for a newcomer)",
		Long: `Runs everything a newcomer needs on one machine:

  1. a local database: with database.dsn / ORBIT_MYSQL_DSN set, that database;
     otherwise a private MariaDB/MySQL server started from the installed
     mariadbd or mysqld, with its data under .local/mysql, listening on
     127.0.0.1 on the port of the last run (.local/mysql.port) or, when
     that is taken, on a new free port, stopped again when orbit dev exits;
  2. the platform migrations;
  3. dev credentials in .local/dev.credentials.json (namespace default,
     application dev, environment development, queue default, every permission);
  4. orbit serve with every server module on server.listen.

The listen address is checked first: when it is taken, orbit dev stops
before it starts anything. Ctrl-C stops the server and the local database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := app.LoadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return app.dev(ctx, cmd, cfg, stateDir)
		},
	}
	cmd.Flags().String("listen", config.DefaultListen, "listen address host:port (server.listen)")
	cmd.Flags().String("metrics-listen", config.DefaultMetricsListen, "address host:port of GET /metrics, empty to disable (server.metrics_listen)")
	cmd.Flags().StringVar(&stateDir, "state-dir", devStateDir, "directory for the local database and dev credentials")
	app.flagKeys["server.listen"] = "listen"
	app.flagKeys["server.metrics_listen"] = "metrics-listen"
	return cmd
}

func (app *App) dev(ctx context.Context, cmd *cobra.Command, cfg *config.Config, stateDir string) error {
	out := cmd.OutOrStdout()
	// Bind the listener before anything else, so that a taken address
	// fails at once instead of after starting and migrating a database.
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	mln, err := devMetricsListener(cmd, cfg)
	if err != nil {
		return err
	}
	if mln != nil {
		defer mln.Close()
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	if err := os.Chmod(stateDir, 0o700); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	if cfg.Database.DSN == "" {
		if _, err := mysqld.FindServer(); err != nil {
			return err
		}
		portPath := filepath.Join(stateDir, devPortFile)
		port, taken := rememberedPort(portPath)
		startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
		fmt.Fprintf(out, "starting local database in %s\n", filepath.Join(stateDir, "mysql"))
		srv, err := mysqld.Start(startCtx, mysqld.Options{
			DataDir: filepath.Join(stateDir, "mysql"),
			Port:    port,
			Durable: true,
			LogFile: filepath.Join(stateDir, "mysql.log"),
		})
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := srv.Stop(stopCtx); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "orbit dev: stopping the local database: %v\n", err)
			}
		}()
		for _, name := range []string{devDatabase, devReceiverDatabase} {
			if err := createDatabase(ctx, srv.DSN(""), name); err != nil {
				return err
			}
		}
		cfg.Database.DSN = srv.DSN(devDatabase)
		dsnPath := filepath.Join(stateDir, devDSNFile)
		if err := os.WriteFile(dsnPath, []byte(cfg.Database.DSN+"\n"), 0o600); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer os.Remove(dsnPath)
		if taken != 0 {
			fmt.Fprintf(out, "port %d of the local database (%s) is taken by another process: using port %d instead; update any DSN you exported\n", taken, portPath, srv.Port())
		}
		if err := os.WriteFile(portPath, []byte(strconv.Itoa(srv.Port())+"\n"), 0o600); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		fmt.Fprintf(out, "local database ready on 127.0.0.1:%d (database %s)\n", srv.Port(), devDatabase)
		fmt.Fprintf(out, "receiver database for examples/result-inbox:\n      export ORBIT_RECEIVER_DSN='%s'\n", srv.DSN(devReceiverDatabase))
	}
	cfg.Database.Migrate = true

	credPath := filepath.Join(stateDir, devCredentialsFile)
	if err := ensureDevCredentials(ctx, cfg, credPath, newLogger(cfg, cmd.ErrOrStderr())); err != nil {
		return err
	}
	fmt.Fprintf(out, "dev credentials: %s\n", credPath)
	fmt.Fprintf(out, "try:  TOKEN=$(sed -n 's/.*\"token\": \"\\(.*\\)\".*/\\1/p' %s)\n", credPath)
	fmt.Fprintf(out, "      curl -s -H \"Authorization: Bearer $TOKEN\" %s/v1/credential\n", cfg.Server.URL())
	return app.serve(ctx, cmd, cfg, ln, mln)
}

// devMetricsListener binds server.metrics_listen for orbit dev. A newcomer
// may well have something on 9090 already (another Prometheus exporter):
// when the default address is taken, orbit dev serves metrics on a free
// loopback port instead and says so, rather than refusing to start. An
// address the user chose is bound as orbit serve binds it, failing when
// taken.
func devMetricsListener(cmd *cobra.Command, cfg *config.Config) (net.Listener, error) {
	if cfg.Server.MetricsListen == "" {
		return nil, nil
	}
	ln, err := listenMetrics(cfg)
	if err == nil || cfg.Server.MetricsListen != config.DefaultMetricsListen {
		return ln, err
	}
	ln, ferr := net.Listen("tcp", "127.0.0.1:0")
	if ferr != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "metrics address %s is taken: serving metrics on %s instead (set --metrics-listen to choose)\n",
		config.DefaultMetricsListen, ln.Addr())
	return ln, nil
}

// rememberedPort returns the port in path when it is free now; when it is
// taken it returns 0 and the taken port, and 0, 0 when path holds none.
func rememberedPort(path string) (port, taken int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || p <= 0 || p > 65535 {
		return 0, 0
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return 0, p
	}
	l.Close()
	return p, 0
}

func createDatabase(ctx context.Context, serverDSN, name string) error {
	pool, err := db.Open(ctx, serverDSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("dev: create database %s: %w", name, err)
	}
	return nil
}

// ensureDevCredentials migrates the database and keeps a working dev
// credential at path: an existing file whose token still authenticates is
// kept; otherwise a new credential replaces it.
func ensureDevCredentials(ctx context.Context, cfg *config.Config, path string, logger *slog.Logger) error {
	pool, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, modules.Migrations()); err != nil {
		return err
	}
	store := admin.NewStore(pool)
	if f, err := admin.ReadCredentialsFile(path); err == nil {
		// Keep a file whose token still works and whose URL is where this
		// server listens; otherwise issue a new one.
		if _, err := store.Authenticate(ctx, "Bearer "+f.Token); err == nil && f.URL == cfg.Server.URL() {
			return nil
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, err = admin.Bootstrap(ctx, store, &admin.BootstrapParams{
		Namespace: "default", Application: "dev", Environment: "development", Queue: "default",
		EventAccess: true, WorkerAccess: true, ReviewAccess: true,
		URL: cfg.Server.URL(), Output: path,
	})
	return err
}

// localDevDSN returns the DSN of a running `orbit dev` database started from
// the working directory, or "" when there is none.
func localDevDSN() string {
	b, err := os.ReadFile(filepath.Join(devStateDir, devDSNFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
