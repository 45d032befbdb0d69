package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/modules"
)

func validateCommand(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Check a config file and report every error at once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := app.LoadConfig(cmd); err != nil {
				return err
			}
			name := app.configFile
			if name == "" {
				name = "configuration"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is valid\n", name)
			return nil
		},
	}
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print build information",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			version, revision, modified := "(devel)", "unknown", false
			if bi, ok := debug.ReadBuildInfo(); ok {
				if bi.Main.Version != "" {
					version = bi.Main.Version
				}
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision":
						revision = s.Value
					case "vcs.modified":
						modified = s.Value == "true"
					}
				}
			}
			if modified {
				revision += "+dirty"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "orbit %s revision %s %s %s/%s\n", version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

func modulesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "modules",
		Short: "List the modules in this binary, their dependencies and roles",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODULE\tREQUIRES\tROLES")
			for _, info := range modules.Registered() {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", info.ID, orDash(info.Requires), orDash(info.Roles))
			}
			tw.Flush()
		},
	}
}

func orDash(list []string) string {
	if len(list) == 0 {
		return "-"
	}
	return strings.Join(list, ",")
}
