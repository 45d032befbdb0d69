// Command subscription-admin walks through the management API of result
// subscriptions with the Go SDK: create, replay the create, query, pause,
// resume, produce one result, list its delivery, and show what retry
// requires. It does not consume results. See README.md for how to run it,
// what it prints and what it leaves behind.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Exit codes.
const (
	exitOK = 0
	// exitFailed: a step failed (an API error, the network, or no delivery
	// in time).
	exitFailed = 1
	// exitConfig: the credentials could not be loaded or do not allow what
	// the example does.
	exitConfig = 2
)

const (
	// requestTimeout bounds each HTTP request.
	requestTimeout = 15 * time.Second
	// deliveryWait bounds the wait for the cancelled task's delivery, which
	// the server's background materialiser creates within about a second.
	deliveryWait = 30 * time.Second
	// pollInterval is the pause between two looks at the deliveries.
	pollInterval = 200 * time.Millisecond
)

// requiredPermissions are what the example uses: bootstrap grants the
// tasks ones by default and the events ones with --event-access.
var requiredPermissions = []string{"events:manage", "events:read", "tasks:submit", "tasks:cancel"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mainCode(ctx, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// mainCode loads the credentials named by the environment, runs the
// example with a new run ID and returns the exit code. Progress goes to
// stdout, the failure line to stderr.
func mainCode(ctx context.Context, stdout, stderr io.Writer) int {
	creds, err := orbit.LoadCredentialsFromEnv()
	if err != nil {
		printLine(stderr, "config", "error", err.Error())
		return exitConfig
	}
	if creds.QueueID == "" {
		printLine(stderr, "config", "error", `the credentials have no queue_id (set "queue_id" in the file or `+orbit.EnvQueueID+")")
		return exitConfig
	}
	client, err := creds.NewClient(
		orbit.WithHTTPClient(&http.Client{Timeout: requestTimeout}),
		orbit.WithUserAgent("orbit-subscription-admin"),
	)
	if err != nil {
		printLine(stderr, "config", "error", err.Error())
		return exitConfig
	}
	return report(stderr, run(ctx, stdout, client, creds.QueueID, newRunID()))
}

// report prints the failure line of err, if any, to stderr and returns the
// exit code for it.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var se *stepError
	if !errors.As(err, &se) {
		se = &stepError{step: "run", err: err}
	}
	se.print(stderr)
	if se.config {
		return exitConfig
	}
	return exitFailed
}

// newRunID returns 8 random hex characters that name this run's
// subscription and idempotency keys.
func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run performs every step against the queue queueID, printing one line per
// step to out. runID makes the subscription name and the idempotency keys
// of this run. A failed step is returned as a *stepError.
//
// The keys stay in memory: this example shows a replay with the same key
// within one run. A real application persists each key with its request
// before the first call and reuses both after a crash or a lost reply.
func run(ctx context.Context, out io.Writer, client *orbit.Client, queueID, runID string) error {
	name := "subscription-admin-" + runID
	key := func(op string) string { return "subscription-admin:" + runID + ":" + op }

	info, err := client.Credential(ctx)
	if err != nil {
		return fail("credential", err)
	}
	var missing []string
	for _, p := range requiredPermissions {
		if !slices.Contains(info.Permissions, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return &stepError{step: "credential", config: true, err: fmt.Errorf(
			"the credential lacks %s; bootstrap one with --event-access", strings.Join(missing, ","))}
	}
	printLine(out, "credential", "credential_id", info.ID, "namespace", info.Namespace, "queue_id", queueID)

	// Create, then replay the same request with the same key.
	create := orbit.CreateSubscriptionRequest{Name: name, QueueID: queueID, MaxPending: 100, MaxAttempts: 20}
	created, err := client.CreateSubscription(ctx, key("create"), create)
	if err != nil {
		return fail("create", err)
	}
	s := created.Subscription
	printLine(out, "create", "subscription_id", s.ID, "name", s.Name, "revision", s.Revision, "enabled", s.Enabled,
		"cursor_sequence", s.CursorSequence, "deduplicated", created.Deduplicated)
	replayed, err := client.CreateSubscription(ctx, key("create"), create)
	if err != nil {
		return fail("replay", err)
	}
	printLine(out, "replay", "subscription_id", replayed.Subscription.ID, "revision", replayed.Subscription.Revision,
		"deduplicated", replayed.Deduplicated)

	// Pause, then resume, each with the revision of a fresh query and a
	// key of its own.
	if _, err := configure(ctx, out, client, s.ID, key("pause"), "pause", false, "example: receiver maintenance"); err != nil {
		return err
	}
	if _, err := configure(ctx, out, client, s.ID, key("resume"), "resume", true, "example: receiver back"); err != nil {
		return err
	}

	// One result: a task submitted and cancelled while PENDING.
	submitted, err := client.SubmitTask(ctx, key("submit"), orbit.SubmitTaskRequest{
		QueueID: queueID, Input: []byte(`{"example":"subscription-admin","run":"` + runID + `"}`),
	})
	if err != nil {
		return fail("submit", err)
	}
	printLine(out, "submit", "task_id", submitted.Task.ID, "state", submitted.Task.State)
	cancelled, err := client.CancelTask(ctx, submitted.Task.ID, key("cancel"), orbit.CancelTaskRequest{Reason: "example: produce one result"})
	if err != nil {
		return fail("cancel", err)
	}
	printLine(out, "cancel", "task_id", cancelled.Task.ID, "state", cancelled.Task.State)

	detail, err := waitDelivery(ctx, client, s.ID, cancelled.Task.ID)
	if err != nil {
		return fail("wait", err)
	}
	d := detail.Delivery
	printLine(out, "wait", "delivery_id", d.ID, "event_id", detail.Event.ID, "event_type", detail.Event.Type,
		"task_id", detail.Event.AggregateID, "sequence", d.Sequence)

	page, err := client.ListEventDeliveries(ctx, s.ID, orbit.ListEventDeliveriesRequest{})
	if err != nil {
		return fail("list", err)
	}
	listed := false
	for _, item := range page.Items {
		if item.ID == d.ID {
			d, listed = item, true
		}
	}
	printLine(out, "list", "deliveries", len(page.Items), "delivery_id", d.ID, "listed", listed, "state", d.State,
		"revision", d.Revision, "attempts", d.Attempts, "attempt_budget", d.AttemptBudget)

	// Retry is for EXPIRED deliveries only; this one is PENDING, so the
	// server answers 409 STATE_CONFLICT and changes nothing.
	retried, err := client.RetryEventDelivery(ctx, s.ID, d.ID, key("retry"), orbit.RetryEventDeliveryRequest{
		ExpectedRevision: d.Revision, Reason: "example: retry needs an EXPIRED delivery", AdditionalAttempts: 1,
	})
	var apiErr *orbit.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == orbit.CodeStateConflict:
		printLine(out, "retry", "delivery_id", d.ID, "state", d.State, "status", apiErr.Status, "code", apiErr.Code,
			"note", "retry accepts only EXPIRED deliveries")
	case err != nil:
		return fail("retry", err)
	default:
		printLine(out, "retry", "delivery_id", retried.Delivery.ID, "state", retried.Delivery.State,
			"attempt_budget", retried.Delivery.AttemptBudget, "deduplicated", retried.Deduplicated)
	}

	// Leave the subscription paused, so that it does not collect a
	// backlog nobody consumes.
	final, err := configure(ctx, out, client, s.ID, key("leave-paused"), "leave-paused", false, "example: finished")
	if err != nil {
		return err
	}
	printLine(out, "done", "subscription_id", final.ID, "name", final.Name, "enabled", final.Enabled, "revision", final.Revision)
	return nil
}

// configure reads the subscription's current revision (one "get" line)
// and sets enabled with it under key (one line named step). It returns the
// subscription as the receipt reports it.
func configure(ctx context.Context, out io.Writer, client *orbit.Client, id, key, step string, enabled bool, reason string) (*orbit.Subscription, error) {
	current, err := client.GetSubscription(ctx, id)
	if err != nil {
		return nil, fail("get", err)
	}
	printLine(out, "get", "subscription_id", current.ID, "revision", current.Revision, "enabled", current.Enabled,
		"types", strings.Join(current.Types, ","), "pending_count", current.PendingCount,
		"max_pending", current.MaxPending, "max_attempts", current.MaxAttempts)
	res, err := client.ConfigureSubscription(ctx, id, key, orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: current.Revision, Enabled: enabled, Reason: reason,
	})
	if err != nil {
		return nil, fail(step, err)
	}
	printLine(out, step, "subscription_id", id, "expected_revision", current.Revision, "revision", res.Subscription.Revision,
		"enabled", res.Subscription.Enabled, "deduplicated", res.Deduplicated)
	return &res.Subscription, nil
}

// waitDelivery polls the subscription's newest deliveries until one
// carries the result of task taskID, for at most deliveryWait.
func waitDelivery(ctx context.Context, client *orbit.Client, subscriptionID, taskID string) (*orbit.DeliveryDetail, error) {
	ctx, cancel := context.WithTimeout(ctx, deliveryWait)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	checked := map[string]bool{}
	for {
		page, err := client.ListEventDeliveries(ctx, subscriptionID, orbit.ListEventDeliveriesRequest{Limit: 100})
		if err != nil {
			return nil, waitError(ctx, err, taskID)
		}
		for _, d := range page.Items {
			if checked[d.ID] {
				continue
			}
			checked[d.ID] = true
			detail, err := client.GetEventDelivery(ctx, subscriptionID, d.ID)
			if err != nil {
				return nil, waitError(ctx, err, taskID)
			}
			if detail.Event.AggregateID == taskID {
				return detail, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, waitError(ctx, ctx.Err(), taskID)
		case <-ticker.C:
		}
	}
}

func waitError(ctx context.Context, err error, taskID string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no delivery for task %s within %s: is the server's subscriptions module running?", taskID, deliveryWait)
	}
	return err
}

// stepError is a failed step.
type stepError struct {
	step string
	// config marks a problem of the credentials rather than of the step.
	config bool
	err    error
}

func fail(step string, err error) error { return &stepError{step: step, err: err} }

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }

func (e *stepError) Unwrap() error { return e.err }

// print writes the failure as one line: the API's status, code and
// request id when the server answered, the message in any case.
func (e *stepError) print(w io.Writer) {
	var apiErr *orbit.APIError
	if errors.As(e.err, &apiErr) {
		printLine(w, e.step, "error", apiErr.Code, "status", apiErr.Status, "request_id", apiErr.RequestID, "message", apiErr.Message)
		return
	}
	printLine(w, e.step, "error", e.err.Error())
}

// printLine writes "step=<step>" and the key=value pairs kv as one line.
// Values with spaces, quotes or '=' are quoted; empty values print as "".
func printLine(w io.Writer, step string, kv ...any) {
	var b strings.Builder
	b.WriteString("step=" + step)
	for i := 0; i+1 < len(kv); i += 2 {
		v := fmt.Sprint(kv[i+1])
		if v == "" || strings.ContainsAny(v, " \t\n\"=\\") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", kv[i], v)
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}
