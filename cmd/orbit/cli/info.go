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

// version and revision are set at build time by the Makefile:
//
//	go build -ldflags "-X github.com/orbitrun/orbit/cmd/orbit/cli.version=v1.2.3 -X github.com/orbitrun/orbit/cmd/orbit/cli.revision=<commit>"
//
// When they are empty, `orbit version` falls back to the build information
// the go command records (module version, vcs.revision, vcs.modified).
var version, revision string

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print build information",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			bi, _ := debug.ReadBuildInfo()
			v, rev := buildVersion(version, revision, bi)
			fmt.Fprintf(cmd.OutOrStdout(), "orbit %s revision %s %s %s/%s\n", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

// buildVersion returns v and rev (set with -ldflags), each falling back to
// the build information bi (which may be nil), then to "(devel)" and
// "unknown".
func buildVersion(v, rev string, bi *debug.BuildInfo) (string, string) {
	if v == "" && bi != nil && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	if rev == "" && bi != nil {
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "+dirty"
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return v, rev
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
