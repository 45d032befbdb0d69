package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

const maxNameLen = 128

// opener loads config and opens the platform database for a running command.
type opener = func(cmd *cobra.Command) (*modules.Env, func(), error)

func adminCommand(open opener) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Manage namespaces, queues and credentials",
	}
	cmd.AddCommand(bootstrapCommand(open), credentialCommand(open))
	return cmd
}

// BootstrapParams are the inputs of Bootstrap.
type BootstrapParams struct {
	Namespace, Application, Environment, Queue string
	EventAccess, WorkerAccess, ReviewAccess    bool
	URL                                        string
	Output                                     string
}

// permissions returns what a bootstrapped credential holds: tasks:submit,
// tasks:read and tasks:cancel always, the rest only on request (S-2).
func (p *BootstrapParams) permissions() []string {
	perms := []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksCancel}
	if p.EventAccess {
		perms = append(perms, auth.PermEventsRead, auth.PermEventsConsume, auth.PermEventsManage)
	}
	if p.WorkerAccess {
		perms = append(perms, auth.PermTasksWork)
	}
	if p.ReviewAccess {
		perms = append(perms, auth.PermTasksReview)
	}
	return perms
}

// Validate returns every invalid flag at once.
func (p *BootstrapParams) Validate() error {
	var errs *multierror.Error
	for _, f := range []struct{ flag, value string }{
		{"--namespace", p.Namespace}, {"--application", p.Application},
		{"--environment", p.Environment}, {"--queue", p.Queue},
	} {
		if !httpx.ValidName(f.value, maxNameLen) {
			errs = multierror.Append(errs, fmt.Errorf("%s: %q is not a valid name (1-128 ASCII letters, digits, '.', '_', '-', starting with a letter or digit)", f.flag, f.value))
		}
	}
	if p.Output == "" {
		errs = multierror.Append(errs, fmt.Errorf("--output: required"))
	}
	return errs.ErrorOrNil()
}

// Bootstrap creates whatever of the namespace, application, environment and
// queue is missing, issues a new credential granted on the queue, and writes
// the credentials file. Re-running with the same names reuses the objects and
// issues another credential. The file is checked before anything is created;
// if writing it fails, the new credential is revoked.
func Bootstrap(ctx context.Context, store *Store, p *BootstrapParams) (*orbit.Credentials, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := checkOutputPath(p.Output); err != nil {
		return nil, err
	}
	sc, err := store.ScopeEnsure(ctx, &ScopeEnsureParams{
		Namespace: p.Namespace, Application: p.Application, Environment: p.Environment, Queue: p.Queue,
	})
	if err != nil {
		return nil, err
	}
	cred, token, err := store.CredentialCreate(ctx, &CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "bootstrap " + p.Queue, Permissions: p.permissions(), Queues: []string{sc.QueueID},
	})
	if err != nil {
		return nil, err
	}
	f := &orbit.Credentials{
		URL: p.URL, Token: token, CredentialID: cred.ID,
		Namespace: sc.Namespace, NamespaceID: sc.NamespaceID,
		Application: sc.Application, ApplicationID: sc.ApplicationID,
		Environment: sc.Environment, EnvironmentID: sc.EnvironmentID,
		Queue: sc.Queue, QueueID: sc.QueueID, Permissions: cred.Permissions,
	}
	if err := writeCredentialsFile(p.Output, f); err != nil {
		if rerr := store.CredentialRevoke(ctx, cred.ID, "credentials file could not be written"); rerr != nil {
			return nil, multierror.Append(err, rerr)
		}
		return nil, err
	}
	return f, nil
}

func bootstrapCommand(open opener) *cobra.Command {
	p := &BootstrapParams{}
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create a namespace, application, environment and queue (where missing) and a credential for them",
		Long: `Creates whatever of the namespace, application, environment and queue is missing and
issues a new credential scoped to them, granted on the queue, with tasks:submit,
tasks:read and tasks:cancel. --event-access adds events:read, events:consume and
events:manage; --worker-access adds tasks:work; --review-access adds tasks:review.

The credentials file is written with mode 0600 and never overwritten; its directory
must not be accessible to other users (chmod 700). The token is shown only there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.Validate(); err != nil {
				return err
			}
			if err := checkOutputPath(p.Output); err != nil {
				return err
			}
			env, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			if p.URL == "" {
				p.URL = env.Config.Server.URL()
			}
			f, err := Bootstrap(cmd.Context(), NewStore(env.DB), p)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "credential_id=%s queue_id=%s permissions=%s output=%s\n",
				f.CredentialID, f.QueueID, strings.Join(f.Permissions, ","), p.Output)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Namespace, "namespace", "", "namespace name (required)")
	fl.StringVar(&p.Application, "application", "", "application name (required)")
	fl.StringVar(&p.Environment, "environment", "", "environment name (required)")
	fl.StringVar(&p.Queue, "queue", "", "queue name (required)")
	fl.BoolVar(&p.EventAccess, "event-access", false, "grant events:read, events:consume and events:manage")
	fl.BoolVar(&p.WorkerAccess, "worker-access", false, "grant tasks:work")
	fl.BoolVar(&p.ReviewAccess, "review-access", false, "grant tasks:review")
	fl.StringVar(&p.URL, "url", "", "server URL written into the file (default: server.public_url or http://<server.listen>)")
	fl.StringVar(&p.Output, "output", "", "credentials file to create (required)")
	return cmd
}

func credentialCommand(open opener) *cobra.Command {
	cmd := &cobra.Command{Use: "credential", Short: "Create, list, revoke credentials and grant queues"}
	cmd.AddCommand(credentialCreateCommand(open), credentialListCommand(open), credentialRevokeCommand(open), credentialGrantCommand(open))
	return cmd
}

func credentialCreateCommand(open opener) *cobra.Command {
	var (
		sc     ScopeEnsureParams
		perms  []string
		queues []string
		label  string
		output string
		url    string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Issue a new credential (the token is shown once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs *multierror.Error
			for _, f := range []struct{ flag, value string }{
				{"--namespace", sc.Namespace}, {"--application", sc.Application}, {"--environment", sc.Environment},
			} {
				if !httpx.ValidName(f.value, maxNameLen) {
					errs = multierror.Append(errs, fmt.Errorf("%s: %q is not a valid name", f.flag, f.value))
				}
			}
			for _, q := range queues {
				if !httpx.ValidName(q, maxNameLen) {
					errs = multierror.Append(errs, fmt.Errorf("--queue: %q is not a valid name", q))
				}
			}
			for _, perm := range perms {
				if !auth.ValidPermission(perm) {
					errs = multierror.Append(errs, fmt.Errorf("--permission: unknown permission %q (known: %s)", perm, strings.Join(auth.AllPermissions, ", ")))
				}
			}
			if output != "" && output != "-" {
				if err := checkOutputPath(output); err != nil {
					errs = multierror.Append(errs, err)
				}
			}
			if err := errs.ErrorOrNil(); err != nil {
				return err
			}
			env, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			store := NewStore(env.DB)
			scope, err := store.ScopeEnsure(cmd.Context(), &sc)
			if err != nil {
				return err
			}
			var queueIDs []string
			var queueName, queueID string
			for _, q := range queues {
				qs, err := store.ScopeEnsure(cmd.Context(), &ScopeEnsureParams{Namespace: sc.Namespace, Application: sc.Application, Environment: sc.Environment, Queue: q})
				if err != nil {
					return err
				}
				queueIDs = append(queueIDs, qs.QueueID)
				if queueName == "" {
					queueName, queueID = q, qs.QueueID
				}
			}
			cred, token, err := store.CredentialCreate(cmd.Context(), &CredentialCreateParams{
				NamespaceID: scope.NamespaceID, ApplicationID: scope.ApplicationID, EnvironmentID: scope.EnvironmentID,
				Label: label, Permissions: perms, Queues: queueIDs,
			})
			if err != nil {
				return err
			}
			if url == "" {
				url = env.Config.Server.URL()
			}
			f := &orbit.Credentials{
				URL: url, Token: token, CredentialID: cred.ID,
				Namespace: scope.Namespace, NamespaceID: scope.NamespaceID,
				Application: scope.Application, ApplicationID: scope.ApplicationID,
				Environment: scope.Environment, EnvironmentID: scope.EnvironmentID,
				Queue: queueName, QueueID: queueID, Permissions: cred.Permissions,
			}
			if output == "" || output == "-" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(f)
			}
			if err := writeCredentialsFile(output, f); err != nil {
				if rerr := store.CredentialRevoke(cmd.Context(), cred.ID, "credentials file could not be written"); rerr != nil {
					return multierror.Append(err, rerr)
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "credential_id=%s output=%s\n", cred.ID, output)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&sc.Namespace, "namespace", "", "namespace name (created if missing)")
	fl.StringVar(&sc.Application, "application", "", "application name (created if missing)")
	fl.StringVar(&sc.Environment, "environment", "", "environment name (created if missing)")
	fl.StringSliceVar(&perms, "permission", nil, "permission to grant; repeat or separate with commas")
	fl.StringSliceVar(&queues, "queue", nil, "queue name to grant (created if missing); repeatable")
	fl.StringVar(&label, "label", "", "operator note stored with the credential")
	fl.StringVar(&output, "output", "-", "credentials file to create, or - for standard output")
	fl.StringVar(&url, "url", "", "server URL written into the file")
	return cmd
}

func credentialListCommand(open opener) *cobra.Command {
	var namespace, output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List credentials: scope, permissions, queues, created and last-used times (never their tokens)",
		Long: `Lists every credential, newest first, read from the database (no server
needed): its id and label, the names of its namespace, application and
environment, whether it is active or revoked, its permissions, the names of
the queues it is granted, when it was created and when it last
authenticated. The last-used time is recorded at most once a minute per
credential, so it is exact to within a minute; "-" means never used.
Tokens are never stored, so they can never be shown.

Example:
  orbit admin credential list --namespace default -o json`,
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
			store := NewStore(env.DB)
			nsID := ""
			if namespace != "" {
				if err := env.DB.QueryRowContext(cmd.Context(), `SELECT id FROM namespaces WHERE name = ?`, namespace).Scan(&nsID); err != nil {
					return fmt.Errorf("--namespace: no namespace %q", namespace)
				}
			}
			creds, err := store.credentialList(cmd.Context(), &credentialListParams{NamespaceID: nsID})
			if err != nil {
				return err
			}
			if output == "json" {
				return printCredentialsJSON(cmd.OutOrStdout(), creds)
			}
			return printCredentials(cmd.OutOrStdout(), creds)
		},
	}
	cmd.Flags().StringVar(&namespace, "namespace", "", "only credentials of this namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// credentialListView is the JSON form of a CredentialListing.
type credentialListView struct {
	ID            string   `json:"id"`
	Label         string   `json:"label"`
	NamespaceID   string   `json:"namespace_id"`
	Namespace     string   `json:"namespace"`
	ApplicationID string   `json:"application_id"`
	Application   string   `json:"application"`
	EnvironmentID string   `json:"environment_id"`
	Environment   string   `json:"environment"`
	State         string   `json:"state"`
	Permissions   []string `json:"permissions"`
	QueueIDs      []string `json:"queue_ids"`
	Queues        []string `json:"queues"`
	CreatedAt     string   `json:"created_at"`
	RevokedAt     string   `json:"revoked_at,omitempty"`
	LastUsedAt    string   `json:"last_used_at,omitempty"`
}

func (c *CredentialListing) state() string {
	if c.RevokedAt != nil {
		return "revoked"
	}
	return "active"
}

func printCredentialsJSON(w io.Writer, creds []CredentialListing) error {
	views := make([]credentialListView, 0, len(creds))
	for _, c := range creds {
		v := credentialListView{
			ID: c.ID, Label: c.Label, NamespaceID: c.NamespaceID, Namespace: c.Namespace,
			ApplicationID: c.ApplicationID, Application: c.Application,
			EnvironmentID: c.EnvironmentID, Environment: c.Environment, State: c.state(),
			Permissions: c.Permissions, QueueIDs: c.Queues, Queues: c.QueueNames, CreatedAt: httpx.FormatTime(c.CreatedAt),
		}
		if c.RevokedAt != nil {
			v.RevokedAt = httpx.FormatTime(*c.RevokedAt)
		}
		if c.LastUsedAt != nil {
			v.LastUsedAt = httpx.FormatTime(*c.LastUsedAt)
		}
		views = append(views, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(views)
}

func printCredentials(w io.Writer, creds []CredentialListing) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tNAMESPACE\tAPPLICATION\tENVIRONMENT\tSTATE\tPERMISSIONS\tQUEUES\tCREATED\tLAST_USED")
	for _, c := range creds {
		lastUsed := "-"
		if c.LastUsedAt != nil {
			lastUsed = c.LastUsedAt.UTC().Format(time.RFC3339)
		}
		label := c.Label
		if label == "" {
			label = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, label, c.Namespace, c.Application, c.Environment,
			c.state(), strings.Join(c.Permissions, ","), strings.Join(c.QueueNames, ","), c.CreatedAt.UTC().Format(time.RFC3339), lastUsed)
	}
	return tw.Flush()
}

func credentialRevokeCommand(open opener) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke CREDENTIAL_ID",
		Short: "Revoke a credential; its token stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !httpx.ValidID(args[0]) {
				return fmt.Errorf("CREDENTIAL_ID: %q is not a 32-character lowercase hex id", args[0])
			}
			env, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := NewStore(env.DB).CredentialRevoke(cmd.Context(), args[0], reason); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "credential_id=%s revoked=true\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log")
	return cmd
}

func credentialGrantCommand(open opener) *cobra.Command {
	var queueIDs []string
	cmd := &cobra.Command{
		Use:   "grant CREDENTIAL_ID --queue-id ID",
		Short: "Grant a credential access to more queues of its namespace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs *multierror.Error
			if !httpx.ValidID(args[0]) {
				errs = multierror.Append(errs, fmt.Errorf("CREDENTIAL_ID: %q is not a 32-character lowercase hex id", args[0]))
			}
			if len(queueIDs) == 0 {
				errs = multierror.Append(errs, fmt.Errorf("--queue-id: at least one is required"))
			}
			for _, q := range queueIDs {
				if !httpx.ValidID(q) {
					errs = multierror.Append(errs, fmt.Errorf("--queue-id: %q is not a 32-character lowercase hex id", q))
				}
			}
			if err := errs.ErrorOrNil(); err != nil {
				return err
			}
			env, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := NewStore(env.DB).CredentialGrantQueues(cmd.Context(), args[0], queueIDs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "credential_id=%s granted=%s\n", args[0], strings.Join(queueIDs, ","))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&queueIDs, "queue-id", nil, "queue id to grant; repeatable")
	return cmd
}
