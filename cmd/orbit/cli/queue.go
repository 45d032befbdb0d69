package cli

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
)

func queueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Client: the queues this credential is granted",
	}
	flags := addClientFlags(cmd)
	cmd.AddCommand(queueListCommand(flags))
	return cmd
}

func queueListCommand(flags *clientFlags) *cobra.Command {
	var (
		limit  int
		cursor string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the queues the credential is granted (GET /v1/queues)",
		Long: `Lists the queues the credential is granted, newest first: id, name and
namespace. Any command's --queue takes one of these names or ids.

Example:
  orbit queue list --credentials .local/dev.credentials.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			c, p, err := flags.connect(cmd)
			if err != nil {
				return err
			}
			return p.listPage(cmd.Context(), c, "/v1/queues", url.Values{}, limit, cursor, []column{{"ID", "id"}, {"NAME", "name"}, {"NAMESPACE", "namespace"}, {"CREATED", "created_at"}})
		},
	}
	addPageFlags(cmd, &limit, &cursor)
	return cmd
}

// addPageFlags adds --limit and --cursor to a list command.
func addPageFlags(cmd *cobra.Command, limit *int, cursor *string) {
	cmd.Flags().IntVar(limit, "limit", 0, "page size, 1 to 100 (default: the server's, 20)")
	cmd.Flags().StringVar(cursor, "cursor", "", "the cursor printed after the previous page")
}

func checkLimit(limit int) error {
	if limit < 0 || limit > 100 {
		return fmt.Errorf("--limit: %d is not from 1 to 100", limit)
	}
	return nil
}

func pageQuery(q url.Values, limit int, cursor string) {
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
}
