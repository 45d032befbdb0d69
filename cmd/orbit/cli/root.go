// Package cli builds the orbit command line: the root command with its
// global flags, the built-in commands, and the commands modules contribute.
package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hashicorp/go-multierror"
	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/modules"
)

const rootLong = `orbit runs the Orbit task-result platform: producers submit tasks, workers run
them, and every final result is delivered to subscribers exactly as committed.

Configuration comes from a YAML file (--config, default ./orbit.yaml when it
exists) and ORBIT_* environment variables. Precedence, highest first:
command-line flag > environment variable > file > default. A key's variable is
ORBIT_ plus the key in upper case with dots and dashes as underscores
(server.listen -> ORBIT_SERVER_LISTEN); database.dsn is also read from
ORBIT_MYSQL_DSN. See orbit.example.yaml for every key and its default.`

// App is the state shared by the commands of one invocation.
type App struct {
	configFile string
	instances  modules.Instances
	// flagKeys maps config keys to the flags of the running command that set
	// them (for example server.listen -> --listen).
	flagKeys map[string]string
}

// NewRoot returns the orbit root command with every command attached.
func NewRoot() *cobra.Command {
	app := &App{instances: modules.NewInstances(), flagKeys: map[string]string{}}
	root := &cobra.Command{
		Use:           "orbit",
		Short:         "Orbit: tasks with reliable, exactly-once-applicable results",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&app.configFile, "config", "", "YAML config file (default ./orbit.yaml when present)")
	root.AddCommand(
		serveCommand(app),
		migrateCommand(app),
		devCommand(app),
		validateCommand(app),
		versionCommand(),
		modulesCommand(),
		queueCommand(),
		taskCommand(),
		subCommand(),
		eventsCommand(),
	)
	for _, info := range modules.Registered() {
		if c, ok := app.instances[info.ID].(modules.Commander); ok {
			root.AddCommand(c.Commands(modules.CLI{Open: app.Open, LoadConfig: app.LoadConfig})...)
		}
	}
	return root
}

// Execute runs the root command with the process arguments and exits with
// status 1 and a one-line message on error.
func Execute(root *cobra.Command) {
	if err := root.ExecuteContext(context.Background()); err != nil {
		for _, e := range Flatten(err) {
			for _, line := range strings.Split(strings.TrimSpace(e.Error()), "\n") {
				fmt.Fprintln(os.Stderr, "orbit: "+line)
			}
		}
		os.Exit(1)
	}
}

// LoadConfig reads the configuration for cmd into a fresh core config and
// every module's section, and validates all of it, returning every error.
func (a *App) LoadConfig(cmd *cobra.Command) (*config.Config, error) {
	core := config.Default()
	positions := map[string]string{}
	file, err := config.Load(config.Source{File: a.configFile, Flags: cmd.Flags(), FlagKeys: a.flagKeys, Positions: positions}, core, a.instances.Sections())
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if err := core.ValidateAt(positions); err != nil {
		errs = append(errs, err)
	}
	if err := a.instances.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		var lines []string
		for _, e := range errs {
			for _, leaf := range Flatten(e) {
				lines = append(lines, configLine(file, positions, strings.TrimSpace(leaf.Error())))
			}
		}
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	return core, nil
}

// configLine places one config problem: a line that starts with the file
// already is kept; a problem of a key the file set ("section.key: …", from
// a module's Validate) gets that key's file:line; any other gets the file
// name, or "config" when there is no file.
func configLine(file string, positions map[string]string, line string) string {
	if file != "" && strings.HasPrefix(line, file+":") {
		return line
	}
	key, _, _ := strings.Cut(line, ": ")
	if pos := positions[key]; pos != "" {
		return pos + ": " + line
	}
	if file == "" {
		return "config: " + line
	}
	return file + ": " + line
}

// Open loads config, logger and database for a CLI command (modules.CLI's
// Open). The schema must be current.
func (a *App) Open(cmd *cobra.Command) (*modules.Env, func(), error) {
	cfg, err := a.LoadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	logger := newLogger(cfg, cmd.ErrOrStderr())
	pool, err := openDatabase(cmd.Context(), cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	if err := migrate.Check(cmd.Context(), pool, modules.Migrations()); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("%w (run: orbit migrate up)", err)
	}
	return &modules.Env{Config: cfg, DB: pool, Logger: logger}, func() { pool.Close() }, nil
}

// openDatabase opens the pool of database.dsn and database.failover_dsns;
// switches between them are logged to logger.
func openDatabase(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*sql.DB, error) {
	if cfg.Database.DSN == "" {
		// Commands run beside `orbit dev` use its local database.
		cfg.Database.DSN = localDevDSN()
	}
	if cfg.Database.DSN == "" {
		return nil, fmt.Errorf("database.dsn: not set (set ORBIT_MYSQL_DSN, or start `make run` / `orbit dev` for a local database)")
	}
	dsns := append([]string{cfg.Database.DSN}, cfg.Database.FailoverDSNs...)
	pool, err := db.OpenList(ctx, dsns, logger)
	if err != nil {
		return nil, err
	}
	pool.SetMaxOpenConns(cfg.Database.MaxOpenConns)
	return pool, nil
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Flatten returns the individual errors inside multierror and errors.Join
// values, in order.
func Flatten(err error) []error {
	var merr *multierror.Error
	if errors.As(err, &merr) && merr == err {
		var out []error
		for _, e := range merr.WrappedErrors() {
			out = append(out, Flatten(e)...)
		}
		return out
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, Flatten(e)...)
		}
		return out
	}
	return []error{err}
}
