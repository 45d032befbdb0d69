// Package inboxreceiver is the inbox-receiver module: `orbit receiver init`,
// `orbit receiver demo` and `orbit receiver consume` run the result-inbox
// example's receiver (examples/result-inbox/receiver), the same code as its
// own cmd/receiver, configured from the `inbox-receiver` YAML section as well
// as the example's environment variables.
package inboxreceiver

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/examples/result-inbox/receiver"
	"github.com/orbitrun/orbit/modules"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func init() { modules.Register(&Module{}) }

// Config is the `inbox-receiver` section. The example's own environment
// variables (ORBIT_RECEIVER_DSN, RECEIVER_NAME, ORBIT_SUBSCRIPTION_ID,
// ORBIT_CREDENTIALS_FILE, ORBIT_URL, ORBIT_TOKEN, ORBIT_QUEUE_ID) take
// precedence over these keys, as environment variables do over the file.
type Config struct {
	// ReceiverDSN is the receiver's own database, named explicitly; never the
	// platform database.
	ReceiverDSN string `yaml:"receiver_dsn"`
	// ReceiverName is the fixed receiving purpose.
	ReceiverName string `yaml:"receiver_name"`
	// SubscriptionID is the subscription `consume` receives from.
	SubscriptionID string `yaml:"subscription_id"`
	// CredentialsFile is the file written by `orbit admin bootstrap`.
	CredentialsFile string `yaml:"credentials_file"`
}

// Module is the inbox-receiver module.
type Module struct {
	cfg Config
}

// OrbitModule returns the module's info.
func (*Module) OrbitModule() modules.Info {
	return modules.Info{
		ID:    "inbox-receiver",
		Roles: []string{"receiver"},
		New: func() modules.Module {
			return &Module{cfg: Config{ReceiverName: receiver.DefaultReceiverName}}
		},
	}
}

// Config returns the section the host decodes into.
func (m *Module) Config() any { return &m.cfg }

// Commands returns `orbit receiver`.
func (m *Module) Commands(cli modules.CLI) []*cobra.Command {
	root := &cobra.Command{
		Use:   "receiver",
		Short: "Apply task results exactly once to the receiver's own MySQL (result-inbox example)",
		Long: `The result-inbox receiver: the same code as examples/result-inbox/cmd/receiver.

  orbit receiver init      create the receiver tables, or those a newer schema added
  orbit receiver demo      subscribe, submit and cancel a task, apply its result, pause
  orbit receiver consume   apply the results of a subscription until SIGINT/SIGTERM
  orbit receiver prune     delete Inbox records of events below the redelivery horizon

Settings come from the inbox-receiver section (receiver_dsn, receiver_name,
subscription_id, credentials_file) and the example's environment variables,
which take precedence: ORBIT_RECEIVER_DSN, RECEIVER_NAME, ORBIT_SUBSCRIPTION_ID,
ORBIT_CREDENTIALS_FILE, ORBIT_URL, ORBIT_TOKEN, ORBIT_QUEUE_ID.`,
	}
	for _, name := range []string{"init", "demo", "consume", "prune"} {
		root.AddCommand(&cobra.Command{
			Use:   name,
			Short: "receiver " + name,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if _, err := cli.LoadConfig(cmd); err != nil {
					return err
				}
				cfg, err := m.receiverConfig(name != "init")
				if err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
				out := cmd.OutOrStdout()
				switch name {
				case "init":
					return receiver.Init(ctx, cfg, out)
				case "demo":
					return receiver.Demo(ctx, cfg, out, logger)
				case "prune":
					return receiver.Prune(ctx, cfg, out)
				default:
					return receiver.Consume(ctx, cfg, out, logger)
				}
			},
		})
	}
	return []*cobra.Command{root}
}

// receiverConfig merges the section with the example's environment.
func (m *Module) receiverConfig(needCredentials bool) (*receiver.Config, error) {
	cfg := &receiver.Config{
		ReceiverDSN:    envOr(receiver.EnvReceiverDSN, m.cfg.ReceiverDSN),
		ReceiverName:   envOr(receiver.EnvReceiverName, m.cfg.ReceiverName),
		SubscriptionID: envOr(receiver.EnvSubscriptionID, m.cfg.SubscriptionID),
	}
	if !needCredentials {
		return cfg, nil
	}
	file := envOr(orbit.EnvCredentialsFile, m.cfg.CredentialsFile)
	if file == "" {
		return nil, fmt.Errorf("inbox-receiver.credentials_file: not set (or set %s)", orbit.EnvCredentialsFile)
	}
	creds, err := orbit.LoadCredentials(file)
	if err != nil {
		return nil, err
	}
	cfg.Credentials = creds
	return cfg, nil
}

func envOr(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return fallback
}

var (
	_ modules.Configurer = (*Module)(nil)
	_ modules.Commander  = (*Module)(nil)
)
