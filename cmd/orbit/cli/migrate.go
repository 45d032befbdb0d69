package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/modules"
)

func migrateCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply or list platform migrations"}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations (safe to run from several nodes at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := app.LoadConfig(cmd)
			if err != nil {
				return err
			}
			pool, err := openDatabase(cmd.Context(), cfg, newLogger(cfg, cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			defer pool.Close()
			applied, err := migrate.Up(cmd.Context(), pool, modules.Migrations())
			for _, name := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %s\n", name)
			}
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
			}
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration, the module that owns it, and its state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := app.LoadConfig(cmd)
			if err != nil {
				return err
			}
			pool, err := openDatabase(cmd.Context(), cfg, newLogger(cfg, cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			defer pool.Close()
			files, err := migrate.Status(cmd.Context(), pool, modules.Migrations())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tMODULE\tNAME\tSTATE\tAPPLIED_AT")
			for _, f := range files {
				at := "-"
				if f.AppliedAt != nil {
					at = f.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
				}
				module := f.Module
				switch {
				case f.State == migrate.StateUnknown:
					module = "-" // a file this binary lacks: its owner is unknown too
				case module == "":
					module = "platform"
				}
				fmt.Fprintf(tw, "%06d\t%s\t%s\t%s\t%s\n", f.Version, module, f.Name, f.State, at)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(up, status)
	return cmd
}
