package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/cmd/orbit/client"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Task states, as the server names them.
var (
	taskStates      = []string{"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW"}
	finalTaskStates = []string{"SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW"}
)

func taskCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Client: submit, inspect, cancel, review and wait for tasks",
	}
	flags := addClientFlags(cmd)
	cmd.AddCommand(taskSubmitCommand(flags), taskGetCommand(flags), taskListCommand(flags),
		taskCancelCommand(flags), taskReviewCommand(flags), taskWaitCommand(flags))
	return cmd
}

// checkID checks an id argument.
func checkID(arg, value string) error {
	if !httpx.ValidID(value) {
		return fmt.Errorf("%s: %q is not an id (32 lowercase hex characters)", arg, value)
	}
	return nil
}

// jsonFlag reads a JSON value from --NAME or, with --NAME-file, from a
// file ("-" is standard input).
func jsonFlag(name, value, file string, stdin io.Reader) (json.RawMessage, bool, error) {
	switch {
	case value != "" && file != "":
		return nil, false, fmt.Errorf("--%s and --%s-file: give only one", name, name)
	case file == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, false, fmt.Errorf("--%s-file: %w", name, err)
		}
		value = string(b)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, false, fmt.Errorf("--%s-file: %w", name, err)
		}
		value = string(b)
	case value == "":
		return nil, false, nil
	}
	if !json.Valid([]byte(value)) {
		return nil, false, fmt.Errorf("--%s: not valid JSON", name)
	}
	return json.RawMessage(strings.TrimSpace(value)), true, nil
}

var taskColumns = []column{
	{"ID", "id"}, {"STATE", "state"}, {"ATTEMPTS", "attempts"}, {"MAX", "max_attempts"},
	{"REVISION", "revision"}, {"CREATED", "created_at"}, {"FINISHED", "finished_at"},
}

func taskSubmitCommand(flags *clientFlags) *cobra.Command {
	var (
		queue, input, inputFile, key string
		idempotent                   bool
		maxAttempts                  int
	)
	cmd := &cobra.Command{
		Use:   "submit --input JSON",
		Short: "Submit a task (POST /v1/tasks)",
		Long: `Submits a task with a JSON input to a queue (default: the credentials file's
queue). The command generates the Idempotency-Key and prints it on standard
error: when you do not know whether a submit went through (a timeout, a lost
connection), repeat it with --idempotency-key KEY and the same flags, and the
server returns the original task instead of creating a second one.

Examples:
  orbit task submit --queue default --input '{"order": 42}'
  orbit task submit --input-file order.json --idempotent --max-attempts 5 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, ok, err := jsonFlag("input", input, inputFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("--input: required: the task's input as JSON (or --input-file FILE)")
			}
			if maxAttempts < 0 || maxAttempts > 100 {
				return fmt.Errorf("--max-attempts: %d is not from 1 to 100", maxAttempts)
			}
			if key, err = idempotencyKey(key); err != nil {
				return err
			}
			c, p, queueID, err := flags.connectQueue(cmd, queue)
			if err != nil {
				return err
			}
			req := map[string]any{"queue_id": queueID, "input": body, "idempotent": idempotent}
			if maxAttempts > 0 {
				req["max_attempts"] = maxAttempts
			}
			return p.send(cmd.Context(), c, "POST", "/v1/tasks", key, req, "")
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&queue, "queue", "", "queue name or id (default: the credentials file's queue)")
	fl.StringVar(&input, "input", "", "the task input, a JSON value")
	fl.StringVar(&inputFile, "input-file", "", "read the input from this file (- for standard input)")
	fl.BoolVar(&idempotent, "idempotent", false, "running the task twice is harmless: the server may retry it")
	fl.IntVar(&maxAttempts, "max-attempts", 0, "attempt budget, 1 to 100 (default: the server's, 3)")
	fl.StringVar(&key, "idempotency-key", "", "repeat an earlier submit with its key (default: a new key)")
	return cmd
}

func taskGetCommand(flags *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get TASK_ID",
		Short: "Show a task with its input and result (GET /v1/tasks/{id})",
		Long: `Shows a task: state, revision, attempts, input, result or error.

Example:
  orbit task get 66666666666666666666666666666666 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("TASK_ID", args[0]); err != nil {
				return err
			}
			c, p, err := flags.connect(cmd)
			if err != nil {
				return err
			}
			raw, err := c.Get(cmd.Context(), "/v1/tasks/"+client.PathID(args[0]), nil)
			if err != nil {
				return err
			}
			return p.object(raw, false)
		},
	}
}

func taskListCommand(flags *clientFlags) *cobra.Command {
	var (
		queue, state, cursor string
		limit                int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tasks of a queue, newest first (GET /v1/tasks)",
		Long: `Lists the tasks of a queue (default: the credentials file's queue), newest
first, one page at a time; the cursor of the next page is printed on
standard error.

Examples:
  orbit task list --queue default --state NEEDS_REVIEW
  orbit task list --limit 100 -o json | jq '.items[].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" && !oneOf(state, taskStates) {
				return fmt.Errorf("--state: %q is not one of %s", state, strings.Join(taskStates, ", "))
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			c, p, queueID, err := flags.connectQueue(cmd, queue)
			if err != nil {
				return err
			}
			q := url.Values{"queue_id": {queueID}}
			if state != "" {
				q.Set("state", state)
			}
			return p.listPage(cmd.Context(), c, "/v1/tasks", q, limit, cursor, taskColumns)
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue name or id (default: the credentials file's queue)")
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state: "+strings.Join(taskStates, ", "))
	addPageFlags(cmd, &limit, &cursor)
	return cmd
}

func oneOf(v string, set []string) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

func taskCancelCommand(flags *clientFlags) *cobra.Command {
	var reason, key string
	cmd := &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Cancel a task (POST /v1/tasks/{id}:cancel)",
		Long: `Cancels a task: a PENDING task is CANCELLED at once; a RUNNING task gets
cancel_requested and ends as its worker reports. A task in a final state
cannot be cancelled (STATE_CONFLICT).

Example:
  orbit task cancel 66666666666666666666666666666666 --reason "customer withdrew"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("TASK_ID", args[0]); err != nil {
				return err
			}
			key, err := idempotencyKey(key)
			if err != nil {
				return err
			}
			c, p, err := flags.connect(cmd)
			if err != nil {
				return err
			}
			req := map[string]any{}
			if reason != "" {
				req["reason"] = reason
			}
			return p.send(cmd.Context(), c, "POST", "/v1/tasks/"+client.PathID(args[0])+":cancel", key, req, "")
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the audit log")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "repeat an earlier cancel with its key (default: a new key)")
	return cmd
}

func taskReviewCommand(flags *clientFlags) *cobra.Command {
	var (
		resolution, reason, result, resultFile, key string
		expected                                    uint64
	)
	cmd := &cobra.Command{
		Use:   "review TASK_ID --resolution requeue|succeeded|failed --reason TEXT",
		Short: "Settle or requeue a NEEDS_REVIEW task (POST /v1/tasks/{id}:review)",
		Long: `Resolves a task in NEEDS_REVIEW: requeue runs it again; succeeded or failed
settles it, optionally with a --result. The command reads the task's current
revision itself; if the task changes in between, the review is refused
(STATE_CONFLICT) and nothing changes.

Example:
  orbit task review 66666666666666666666666666666666 --resolution succeeded \
    --reason "payment confirmed by the bank" --result '{"paid": true}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("TASK_ID", args[0]); err != nil {
				return err
			}
			if !oneOf(resolution, []string{"requeue", "succeeded", "failed"}) {
				return fmt.Errorf("--resolution: %q is not requeue, succeeded or failed", resolution)
			}
			if err := requireReason(reason); err != nil {
				return err
			}
			res, hasResult, err := jsonFlag("result", result, resultFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if hasResult && resolution == "requeue" {
				return fmt.Errorf("--result: not allowed with --resolution requeue")
			}
			if key, err = idempotencyKey(key); err != nil {
				return err
			}
			c, p, err := flags.connect(cmd)
			if err != nil {
				return err
			}
			path := "/v1/tasks/" + client.PathID(args[0])
			rev, err := expectedRevision(cmd, c, path, "", expected)
			if err != nil {
				return err
			}
			req := map[string]any{"expected_revision": rev, "resolution": resolution, "reason": reason}
			if hasResult {
				req["result"] = res
			}
			return p.send(cmd.Context(), c, "POST", path+":review", key, req, "the task", "--expected-revision", rev)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&resolution, "resolution", "", "requeue, succeeded or failed (required)")
	fl.StringVar(&reason, "reason", "", "why, kept in the audit log (required)")
	fl.StringVar(&result, "result", "", "the task's result, a JSON value (not with requeue)")
	fl.StringVar(&resultFile, "result-file", "", "read the result from this file (- for standard input)")
	fl.Uint64Var(&expected, "expected-revision", 0, "the revision to act on (default: the task's current one, read first)")
	fl.StringVar(&key, "idempotency-key", "", "repeat an earlier review with its key and --expected-revision (default: a new key)")
	return cmd
}

func taskWaitCommand(flags *clientFlags) *cobra.Command {
	var timeout, interval time.Duration
	cmd := &cobra.Command{
		Use:   "wait TASK_ID",
		Short: "Wait until a task reaches a final state, then show it",
		Long: `Polls a task until it is SUCCEEDED, FAILED, CANCELLED or NEEDS_REVIEW, then
shows it as orbit task get does. The exit status is 0 whatever the final
state; use -o json and the state member to branch. With --timeout, a task
still unfinished when it passes is an error.

Example:
  id=$(orbit task submit --input '{"n": 1}' -o json | jq -r .task.id)
  orbit task wait "$id" --timeout 2m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("TASK_ID", args[0]); err != nil {
				return err
			}
			if timeout < 0 {
				return fmt.Errorf("--timeout: must not be negative")
			}
			if interval < 10*time.Millisecond {
				return fmt.Errorf("--interval: %s is shorter than 10ms", interval)
			}
			c, p, err := flags.connect(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var deadline <-chan time.Time
			if timeout > 0 {
				timer := time.NewTimer(timeout)
				defer timer.Stop()
				deadline = timer.C
			}
			ticker := time.NewTicker(interval)
			defer ticker.Stop()
			for {
				raw, err := c.Get(ctx, "/v1/tasks/"+client.PathID(args[0]), nil)
				if err != nil {
					return err
				}
				state := cell(field(raw, "state"))
				if oneOf(state, finalTaskStates) {
					return p.object(raw, false)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-deadline:
					return fmt.Errorf("--timeout: task %s is still %s after %s", args[0], state, timeout)
				case <-ticker.C:
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default: wait for ever)")
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "how often to look")
	return cmd
}
