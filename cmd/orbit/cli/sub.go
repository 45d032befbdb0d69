package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/cmd/orbit/client"
	"github.com/orbitrun/orbit/internal/httpx"
)

var (
	eventTypes      = []string{"task.succeeded", "task.failed", "task.cancelled", "task.needs_review"}
	deliveryStates  = []string{"PENDING", "LEASED", "ACKED", "EXPIRED"}
	expiredReasons  = []string{"ATTEMPTS_EXHAUSTED", "REJECTED", "SKIPPED"}
	subscriptionCol = []column{
		{"ID", "id"}, {"NAME", "name"}, {"ENABLED", "enabled"}, {"REVISION", "revision"}, {"CURSOR", "cursor_sequence"},
		{"PENDING", "pending_count"}, {"BLOCKED", "blocked_reason"}, {"LAG", "lag"}, {"DEAD_LETTERS", "dead_letters"},
	}
	deliveryCol = []column{
		{"ID", "id"}, {"SEQUENCE", "sequence"}, {"STATE", "state"}, {"ATTEMPTS", "attempts"}, {"BUDGET", "attempt_budget"},
		{"EXPIRED_REASON", "expired_reason"}, {"LAST_ERROR", "last_error"}, {"CREATED", "created_at"},
	}
)

func subCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sub",
		Short: "Client: manage result subscriptions and their deliveries",
		Long: `Manages the credential's own result subscriptions: create, list, inspect,
pause, resume and delete them; list their deliveries; recover dead letters
(retry), replay acknowledged events and skip ahead. SUB is a subscription id,
or its name (looked up among the credential's subscriptions on --queue).`,
	}
	flags := addClientFlags(cmd)
	cmd.AddCommand(subCreateCommand(flags), subListCommand(flags), subGetCommand(flags),
		subConfigureCommand(flags, false), subConfigureCommand(flags, true), subDeleteCommand(flags),
		subDeliveriesCommand(flags), subRetryCommand(flags), subReplayCommand(flags), subSkipCommand(flags))
	return cmd
}

// subArg resolves the SUB argument of a command with a --queue flag.
type subArg struct {
	queue string
}

func (s *subArg) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.queue, "queue", "", "queue name or id where SUB is looked up by name (default: the credentials file's queue)")
}

func (s *subArg) resolve(ctx context.Context, c *client.Client, value string) (string, error) {
	return c.SubscriptionID(ctx, value, "--queue", s.queue)
}

// connect connects and resolves the SUB argument value to a subscription
// id.
func (s *subArg) connect(cmd *cobra.Command, flags *clientFlags, value string) (*client.Client, *printer, string, error) {
	c, p, err := flags.connect(cmd)
	if err != nil {
		return nil, nil, "", err
	}
	id, err := s.resolve(cmd.Context(), c, value)
	if err != nil {
		return nil, nil, "", err
	}
	return c, p, id, nil
}

// subChange is a change of one subscription at its revision (configure,
// delete, skip): a concurrent change is refused (STATE_CONFLICT) instead
// of overwritten.
type subChange struct {
	sub      subArg
	key      string
	expected uint64
}

func (s *subChange) add(cmd *cobra.Command, verb string) {
	s.sub.add(cmd)
	cmd.Flags().Uint64Var(&s.expected, "expected-revision", 0, "the revision to act on (default: the current one, read first)")
	cmd.Flags().StringVar(&s.key, "idempotency-key", "", "repeat an earlier "+verb+" with its key and --expected-revision (default: a new key)")
}

// run resolves SUB (arg), reads its revision unless --expected-revision,
// asks question (formatted with the subscription id) unless it is empty,
// and sends body with expected_revision to the subscription's path plus
// suffix.
func (s *subChange) run(cmd *cobra.Command, flags *clientFlags, arg, method, suffix string, body map[string]any, question string) error {
	key, err := idempotencyKey(s.key)
	if err != nil {
		return err
	}
	c, p, id, err := s.sub.connect(cmd, flags, arg)
	if err != nil {
		return err
	}
	rev, err := expectedRevision(cmd, c, subPath(id), "", s.expected)
	if err != nil {
		return err
	}
	if question != "" {
		if err := p.confirm(fmt.Sprintf(question, id)); err != nil {
			return err
		}
	}
	body["expected_revision"] = rev
	return p.send(cmd.Context(), c, method, subPath(id)+suffix, key, body, "the subscription", "--expected-revision", rev)
}

func subPath(id string) string { return "/v1/subscriptions/" + client.PathID(id) }

// sequenceFlag checks a sequence flag: a canonical decimal.
func sequenceFlag(flag, value string) error {
	if _, err := httpx.ParseUint64(value); err != nil {
		return fmt.Errorf("%s: %q is not a sequence (a decimal number without sign or leading zero)", flag, value)
	}
	return nil
}

func subCreateCommand(flags *clientFlags) *cobra.Command {
	var (
		queue, name, from, key  string
		types                   []string
		maxPending, maxAttempts int
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME",
		Short: "Create a subscription to a queue's results (POST /v1/subscriptions)",
		Long: `Creates a subscription owned by this credential on a queue (default: the
credentials file's queue). Delivery starts after the queue's latest result,
or after --from-sequence (0: from the oldest retained result).

Example:
  orbit sub create --name billing --queue default --types task.succeeded,task.failed --from-sequence 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !httpx.ValidName(name, 128) {
				return fmt.Errorf("--name: %q is not a valid name (1-128 ASCII letters, digits, '.', '_', '-', starting with a letter or digit)", name)
			}
			for _, t := range types {
				if !oneOf(t, eventTypes) {
					return fmt.Errorf("--types: %q is not one of %s", t, strings.Join(eventTypes, ", "))
				}
			}
			if from != "" {
				if err := sequenceFlag("--from-sequence", from); err != nil {
					return err
				}
			}
			if maxPending < 0 || maxPending > 1000 {
				return fmt.Errorf("--max-pending: %d is not from 1 to 1000", maxPending)
			}
			if maxAttempts < 0 || maxAttempts > 100 {
				return fmt.Errorf("--max-attempts: %d is not from 1 to 100", maxAttempts)
			}
			key, err := idempotencyKey(key)
			if err != nil {
				return err
			}
			c, p, queueID, err := flags.connectQueue(cmd, queue)
			if err != nil {
				return err
			}
			req := map[string]any{"name": name, "queue_id": queueID}
			if len(types) > 0 {
				req["types"] = types
			}
			if from != "" {
				req["from_sequence"] = from
			}
			if maxPending > 0 {
				req["max_pending"] = maxPending
			}
			if maxAttempts > 0 {
				req["max_attempts"] = maxAttempts
			}
			return p.send(cmd.Context(), c, "POST", "/v1/subscriptions", key, req, "")
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "queue name or id (default: the credentials file's queue)")
	fl.StringVar(&name, "name", "", "subscription name, unique in the namespace (required)")
	fl.StringSliceVar(&types, "types", nil, "event types to deliver, comma-separated (default: all four): "+strings.Join(eventTypes, ", "))
	fl.StringVar(&from, "from-sequence", "", "deliver the events after this sequence (0: from the oldest retained; default: after the latest)")
	fl.IntVar(&maxPending, "max-pending", 0, "backlog bound, 1 to 1000 (default: the server's, 100)")
	fl.IntVar(&maxAttempts, "max-attempts", 0, "attempts per delivery, 1 to 100 (default: the server's, 20)")
	fl.StringVar(&key, "idempotency-key", "", "repeat an earlier create with its key (default: a new key)")
	return cmd
}

func subListCommand(flags *clientFlags) *cobra.Command {
	var (
		queue, cursor string
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the credential's subscriptions on a queue (GET /v1/subscriptions)",
		Long: `Lists this credential's subscriptions on a queue (default: the credentials
file's queue), newest first, with why each one does not move (BLOCKED) and
its lag where the server reports them.

Example:
  orbit sub list --queue default`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			c, p, queueID, err := flags.connectQueue(cmd, queue)
			if err != nil {
				return err
			}
			return p.listPage(cmd.Context(), c, "/v1/subscriptions", url.Values{"queue_id": {queueID}}, limit, cursor, subscriptionCol)
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue name or id (default: the credentials file's queue)")
	addPageFlags(cmd, &limit, &cursor)
	return cmd
}

func subGetCommand(flags *clientFlags) *cobra.Command {
	var sub subArg
	cmd := &cobra.Command{
		Use:   "get SUB",
		Short: "Show a subscription (GET /v1/subscriptions/{id})",
		Long: `Shows a subscription: enabled, revision, cursor, backlog and, where the
server reports them, blocked_reason, lag and dead letters.

Example:
  orbit sub get billing -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, id, err := sub.connect(cmd, flags, args[0])
			if err != nil {
				return err
			}
			raw, err := c.Get(cmd.Context(), subPath(id), nil)
			if err != nil {
				return err
			}
			return p.object(raw, false)
		},
	}
	sub.add(cmd)
	return cmd
}

func subConfigureCommand(flags *clientFlags, enable bool) *cobra.Command {
	var (
		change        subChange
		reason        string
		verb, example = "pause", "orbit sub pause billing --reason \"receiver maintenance\""
	)
	short := "Pause a subscription: nothing new is delivered (POST …:configure)"
	if enable {
		verb, example = "resume", "orbit sub resume billing --reason \"maintenance done\""
		short = "Resume a paused subscription (POST …:configure)"
	}
	cmd := &cobra.Command{
		Use:   verb + " SUB --reason TEXT",
		Short: short,
		Long: `Reads the subscription's current revision and sends it with the change, so
that a concurrent change is refused (STATE_CONFLICT) instead of overwritten:
then nothing changed, and you look again and repeat. Every call is an
audited change, even when the subscription is already in that state.

Example:
  ` + example,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason); err != nil {
				return err
			}
			return change.run(cmd, flags, args[0], "POST", ":configure", map[string]any{"enabled": enable, "reason": reason}, "")
		},
	}
	change.add(cmd, verb)
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	return cmd
}

func subDeleteCommand(flags *clientFlags) *cobra.Command {
	var (
		change subChange
		reason string
		yes    bool
	)
	cmd := &cobra.Command{
		Use:   "delete SUB --reason TEXT",
		Short: "Delete a subscription and its deliveries (DELETE /v1/subscriptions/{id})",
		Long: `Deletes a subscription: it stops at once, its consumers are disconnected,
its deliveries are removed and its name can be used again. It cannot be
undone, so the command asks first unless --yes. It reads the current
revision itself; a concurrent change is refused (STATE_CONFLICT).

Example:
  orbit sub delete billing --reason "replaced by billing-v2" --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason); err != nil {
				return err
			}
			question := "delete subscription %s and all its deliveries?"
			if yes {
				question = ""
			}
			return change.run(cmd, flags, args[0], "DELETE", "", map[string]any{"reason": reason}, question)
		},
	}
	change.add(cmd, "delete")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func subDeliveriesCommand(flags *clientFlags) *cobra.Command {
	var (
		sub                          subArg
		state, expiredReason, cursor string
		limit                        int
	)
	cmd := &cobra.Command{
		Use:   "deliveries SUB [DELIVERY_ID]",
		Short: "List a subscription's deliveries, or show one with its event",
		Long: `Lists a subscription's deliveries, newest first (GET …/deliveries); EXPIRED
ones are the dead letters. With DELIVERY_ID, shows that delivery and its
event (GET …/deliveries/{delivery_id}).

Examples:
  orbit sub deliveries billing --state EXPIRED
  orbit sub deliveries billing 77777777777777777777777777777777 -o json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if err := checkID("DELIVERY_ID", args[1]); err != nil {
					return err
				}
			}
			if state != "" && !oneOf(state, deliveryStates) {
				return fmt.Errorf("--state: %q is not one of %s", state, strings.Join(deliveryStates, ", "))
			}
			if expiredReason != "" && !oneOf(expiredReason, expiredReasons) {
				return fmt.Errorf("--expired-reason: %q is not one of %s", expiredReason, strings.Join(expiredReasons, ", "))
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			c, p, id, err := sub.connect(cmd, flags, args[0])
			if err != nil {
				return err
			}
			if len(args) == 2 {
				raw, err := c.Get(cmd.Context(), subPath(id)+"/deliveries/"+client.PathID(args[1]), nil)
				if err != nil {
					return err
				}
				return p.object(raw, true)
			}
			q := url.Values{}
			if state != "" {
				q.Set("state", state)
			}
			if expiredReason != "" {
				q.Set("expired_reason", expiredReason)
			}
			return p.listPage(cmd.Context(), c, subPath(id)+"/deliveries", q, limit, cursor, deliveryCol)
		},
	}
	sub.add(cmd)
	cmd.Flags().StringVar(&state, "state", "", "only deliveries in this state: "+strings.Join(deliveryStates, ", "))
	cmd.Flags().StringVar(&expiredReason, "expired-reason", "", "only dead letters of this reason: "+strings.Join(expiredReasons, ", "))
	addPageFlags(cmd, &limit, &cursor)
	return cmd
}

// guarded runs a guarded bulk change (K-7, K-8): a dry run that counts
// what body matches, the question, then the real run with that count as
// expected_count, so that a change of the matching set in between is
// refused (STATE_CONFLICT) instead of acting on more or fewer than shown.
type guarded struct {
	dryRun, yes bool
	expected    int64
	key         string
}

func (g *guarded) add(cmd *cobra.Command, verb string) {
	cmd.Flags().BoolVar(&g.dryRun, "dry-run", false, "only count what would be "+verb+" and show a sample")
	cmd.Flags().BoolVar(&g.yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().Int64Var(&g.expected, "expected-count", 0, "the count to act on, skipping the dry run (to repeat an earlier run with its key)")
	cmd.Flags().StringVar(&g.key, "idempotency-key", "", "repeat an earlier run with its key and --expected-count (default: a new key)")
}

func (g *guarded) run(cmd *cobra.Command, c *client.Client, p *printer, path string, body map[string]any, question string) error {
	counted := cmd.Flags().Changed("expected-count")
	if counted && g.expected < 1 {
		return fmt.Errorf("--expected-count: %d is not a positive count", g.expected)
	}
	if g.dryRun && counted {
		return fmt.Errorf("--dry-run: not with --expected-count")
	}
	key, err := idempotencyKey(g.key)
	if err != nil {
		return err
	}
	var expected json.RawMessage
	if counted {
		expected = json.RawMessage(strconv.FormatInt(g.expected, 10))
	} else {
		dry := clone(body)
		dry["dry_run"] = true
		// A dry run changes nothing; its own fresh key keeps it apart from
		// the real run's receipt.
		raw, err := c.Do(cmd.Context(), "POST", path, nil, client.NewKey(), dry)
		if err != nil {
			return err
		}
		matched := field(raw, "matched")
		n, err := client.Count(matched)
		if err != nil {
			return fmt.Errorf("dry run: %w", err)
		}
		if g.dryRun {
			return p.object(raw, false)
		}
		p.note("dry run: %d match; sample: %s", n, cell(field(raw, "sample")))
		if n == 0 {
			p.note("nothing to do")
			if p.json {
				return p.raw(raw)
			}
			return nil
		}
		expected = matched
	}
	if !g.yes {
		if err := p.confirm(fmt.Sprintf(question, cell(expected))); err != nil {
			return err
		}
	}
	body["expected_count"] = expected
	p.noteKey(key, "--expected-count", cell(expected))
	raw, err := c.Do(cmd.Context(), "POST", path, nil, key, body)
	if err != nil {
		if client.IsCode(err, "STATE_CONFLICT") {
			return fmt.Errorf("%w; what matches changed since it was counted, nothing was changed: repeat the command", err)
		}
		return err
	}
	return p.object(raw, true)
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func subRetryCommand(flags *clientFlags) *cobra.Command {
	var (
		sub                                           subArg
		g                                             guarded
		reason, deliveryID, expiredReason, fromS, toS string
		additional                                    int
		expected                                      uint64
	)
	cmd := &cobra.Command{
		Use:   "retry SUB --reason TEXT",
		Short: "Give dead letters (EXPIRED deliveries) more attempts",
		Long: `Makes EXPIRED deliveries PENDING again with --additional-attempts more
attempts, keeping their ids, attempts and events.

Bulk (POST …/deliveries:retry): the command first counts what the filter
(--expired-reason, --from-sequence, --to-sequence) matches with a dry run,
prints the count and a sample, and asks before it retries them unless
--yes; the real run carries that count, so if the set changed meanwhile the
server refuses it and nothing changes. --dry-run stops after the count.

One delivery (--delivery ID, POST …/deliveries/{id}:retry): reads the
delivery's revision itself and retries it.

Examples:
  orbit sub retry billing --reason "receiver fixed" --expired-reason ATTEMPTS_EXHAUSTED
  orbit sub retry billing --delivery 77777777777777777777777777777777 --reason "fixed" --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason); err != nil {
				return err
			}
			if additional < 1 || additional > 100 {
				return fmt.Errorf("--additional-attempts: %d is not from 1 to 100", additional)
			}
			if deliveryID != "" {
				if err := checkID("--delivery", deliveryID); err != nil {
					return err
				}
				if expiredReason != "" || fromS != "" || toS != "" || g.dryRun || cmd.Flags().Changed("expected-count") {
					return fmt.Errorf("--delivery: retries one delivery; it takes no filter, --dry-run or --expected-count")
				}
			}
			if expiredReason != "" && !oneOf(expiredReason, expiredReasons) {
				return fmt.Errorf("--expired-reason: %q is not one of %s", expiredReason, strings.Join(expiredReasons, ", "))
			}
			for _, s := range []struct{ flag, v string }{{"--from-sequence", fromS}, {"--to-sequence", toS}} {
				if s.v != "" {
					if err := sequenceFlag(s.flag, s.v); err != nil {
						return err
					}
				}
			}
			c, p, id, err := sub.connect(cmd, flags, args[0])
			if err != nil {
				return err
			}
			if deliveryID != "" {
				return retryOne(cmd, c, p, id, deliveryID, reason, additional, g, expected)
			}
			filter := map[string]any{"state": "EXPIRED"}
			if expiredReason != "" {
				filter["expired_reason"] = expiredReason
			}
			if fromS != "" {
				filter["from_sequence"] = fromS
			}
			if toS != "" {
				filter["to_sequence"] = toS
			}
			body := map[string]any{"filter": filter, "additional_attempts": additional, "reason": reason}
			return g.run(cmd, c, p, subPath(id)+"/deliveries:retry", body, "retry %s dead letters of subscription "+id+"?")
		},
	}
	sub.add(cmd)
	g.add(cmd, "retried")
	fl := cmd.Flags()
	fl.StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	fl.IntVar(&additional, "additional-attempts", 1, "attempts to add to each delivery's budget, 1 to 100")
	fl.StringVar(&deliveryID, "delivery", "", "retry only this delivery")
	fl.Uint64Var(&expected, "expected-revision", 0, "with --delivery: the delivery revision to act on (default: its current one, read first)")
	fl.StringVar(&expiredReason, "expired-reason", "", "only dead letters of this reason: "+strings.Join(expiredReasons, ", "))
	fl.StringVar(&fromS, "from-sequence", "", "only events from this sequence on")
	fl.StringVar(&toS, "to-sequence", "", "only events up to this sequence")
	return cmd
}

// retryOne retries one EXPIRED delivery (S-21) at its current revision.
func retryOne(cmd *cobra.Command, c *client.Client, p *printer, subID, deliveryID, reason string, additional int, g guarded, expected uint64) error {
	key, err := idempotencyKey(g.key)
	if err != nil {
		return err
	}
	path := subPath(subID) + "/deliveries/" + client.PathID(deliveryID)
	rev, err := expectedRevision(cmd, c, path, "delivery", expected)
	if err != nil {
		return err
	}
	if !g.yes {
		if err := p.confirm(fmt.Sprintf("retry delivery %s with %d more attempts?", deliveryID, additional)); err != nil {
			return err
		}
	}
	return p.send(cmd.Context(), c, "POST", path+":retry", key,
		map[string]any{"expected_revision": rev, "reason": reason, "additional_attempts": additional},
		"the delivery", "--expected-revision", rev)
}

func subReplayCommand(flags *clientFlags) *cobra.Command {
	var (
		sub              subArg
		g                guarded
		reason, from, to string
	)
	cmd := &cobra.Command{
		Use:   "replay SUB --from-sequence N --to-sequence M --reason TEXT",
		Short: "Deliver acknowledged events again (POST /v1/subscriptions/{id}:replay)",
		Long: `Re-opens the ACKED deliveries of the events from --from-sequence to
--to-sequence: they are delivered again. Receivers deduplicate by event id,
so a replay is safe for an Inbox. The command counts the range with a dry
run first, prints the count and asks before it replays unless --yes; the
real run carries that count, so if the set changed meanwhile the server
refuses it and nothing changes. --dry-run stops after the count.

Example:
  orbit sub replay billing --from-sequence 100 --to-sequence 250 --reason "rebuild the ledger"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason); err != nil {
				return err
			}
			if from == "" {
				return fmt.Errorf("--from-sequence: required")
			}
			if to == "" {
				return fmt.Errorf("--to-sequence: required")
			}
			for _, s := range []struct{ flag, v string }{{"--from-sequence", from}, {"--to-sequence", to}} {
				if err := sequenceFlag(s.flag, s.v); err != nil {
					return err
				}
			}
			c, p, id, err := sub.connect(cmd, flags, args[0])
			if err != nil {
				return err
			}
			body := map[string]any{"from_sequence": from, "to_sequence": to, "reason": reason}
			return g.run(cmd, c, p, subPath(id)+":replay", body, "replay %s acknowledged events of subscription "+id+"?")
		},
	}
	sub.add(cmd)
	g.add(cmd, "replayed")
	cmd.Flags().StringVar(&from, "from-sequence", "", "first sequence to replay (required)")
	cmd.Flags().StringVar(&to, "to-sequence", "", "last sequence to replay (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	return cmd
}

func subSkipCommand(flags *clientFlags) *cobra.Command {
	var (
		change     subChange
		reason, to string
	)
	cmd := &cobra.Command{
		Use:   "skip SUB --to-sequence N|head --reason TEXT",
		Short: "Move a subscription's cursor forward (POST /v1/subscriptions/{id}:skip)",
		Long: `Moves the cursor forward to --to-sequence, or to the queue's latest result
with "head": events up to there are not delivered, and PENDING deliveries
below become dead letters (EXPIRED, SKIPPED). It never moves backward (use
replay). It is also how a subscription stopped by EVENT_HISTORY_EXPIRED
moves again. The command reads the current revision itself; a concurrent
change is refused (STATE_CONFLICT).

Example:
  orbit sub skip billing --to-sequence head --reason "events before the migration are irrelevant"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason); err != nil {
				return err
			}
			if to == "" {
				return fmt.Errorf("--to-sequence: required (a sequence or head)")
			}
			if to != "head" {
				if err := sequenceFlag("--to-sequence", to); err != nil {
					return err
				}
			}
			return change.run(cmd, flags, args[0], "POST", ":skip", map[string]any{"to_sequence": to, "reason": reason}, "")
		},
	}
	change.add(cmd, "skip")
	cmd.Flags().StringVar(&to, "to-sequence", "", "the new cursor: a sequence, or head (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	return cmd
}
