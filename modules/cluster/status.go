package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules"
)

// Commands returns `orbit cluster`.
func (m *Module) Commands(cli modules.CLI) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the orbit serve nodes that share the database",
	}
	cmd.AddCommand(statusCommand(cli.Open))
	return []*cobra.Command{cmd}
}

func statusCommand(open func(cmd *cobra.Command) (*modules.Env, func(), error)) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the nodes: state, last heartbeat and open connections",
		Long: `Lists every orbit serve node registered in the database, newest first, read
from the database (no server needed): its name and id, its state (alive;
late: no heartbeat for 3 intervals and no live node has marked it dead yet;
dead: marked dead by another node, which closed its sessions; stopped: shut
down in order), how long ago its last heartbeat was by the database clock,
and its open worker and event connections. Stopped and dead nodes are
listed for a day.

Example:
  orbit cluster status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o/--output: %q is not table or json", output)
			}
			env, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			conns := registeredConnections()
			nodes, err := NodeList(cmd.Context(), env.DB, conns)
			if err != nil {
				return err
			}
			var kinds []string
			for _, c := range conns {
				kinds = append(kinds, c.ConnectionKind())
			}
			if output == "json" {
				return printNodesJSON(cmd.OutOrStdout(), nodes)
			}
			return printNodes(cmd.OutOrStdout(), nodes, kinds)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// nodeJSON is the JSON form of a NodeView.
type nodeJSON struct {
	ID                  string         `json:"id"`
	Name                string         `json:"name"`
	PID                 int            `json:"pid"`
	State               string         `json:"state"`
	StartedAt           string         `json:"started_at"`
	HeartbeatAt         string         `json:"heartbeat_at"`
	HeartbeatAgeMS      int64          `json:"heartbeat_age_ms"`
	HeartbeatIntervalMS int64          `json:"heartbeat_interval_ms"`
	StoppedAt           string         `json:"stopped_at,omitempty"`
	DeadAt              string         `json:"dead_at,omitempty"`
	Connections         map[string]int `json:"connections"`
}

func printNodesJSON(w io.Writer, nodes []NodeView) error {
	views := make([]nodeJSON, 0, len(nodes))
	for _, n := range nodes {
		v := nodeJSON{
			ID: n.ID, Name: n.Name, PID: n.PID, State: n.State(),
			StartedAt: httpx.FormatTime(n.StartedAt), HeartbeatAt: httpx.FormatTime(n.HeartbeatAt),
			HeartbeatAgeMS: n.HeartbeatAge.Milliseconds(), HeartbeatIntervalMS: n.HeartbeatInterval.Milliseconds(),
			Connections: n.Connections,
		}
		if n.StoppedAt != nil {
			v.StoppedAt = httpx.FormatTime(*n.StoppedAt)
		}
		if n.DeadAt != nil {
			v.DeadAt = httpx.FormatTime(*n.DeadAt)
		}
		views = append(views, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(views)
}

func printNodes(w io.Writer, nodes []NodeView, kinds []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"NAME", "ID", "PID", "STATE", "HEARTBEAT"}
	for _, k := range kinds {
		header = append(header, strings.ToUpper(k)+"S")
	}
	header = append(header, "STARTED")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, n := range nodes {
		row := []string{n.Name, n.ID, fmt.Sprint(n.PID), n.State(), n.HeartbeatAge.Round(time.Millisecond).String() + " ago"}
		for _, k := range kinds {
			row = append(row, fmt.Sprint(n.Connections[k]))
		}
		row = append(row, n.StartedAt.UTC().Format(time.RFC3339))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
