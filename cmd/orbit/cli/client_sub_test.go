//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/subscriptions"
	sdk "github.com/orbitrun/orbit/sdk/go"
)

// shortLeases makes delivery leases run out within a fraction of a second
// and the sweeper recover them as quickly, so that a test can make dead
// letters the way production does.
func shortLeases() []servertest.Option {
	return []servertest.Option{
		servertest.ModuleConfig("events", func(c *events.Config) { c.LeaseDuration = 300 * time.Millisecond }),
		servertest.ModuleConfig("subscriptions", func(c *subscriptions.Config) { c.RecoverInterval = 50 * time.Millisecond }),
	}
}

// results makes n task.cancelled results on the env's queue, through the
// binary.
func (e *cliEnv) results(t *testing.T, n int) {
	t.Helper()
	for range n {
		var rec taskReceipt
		e.okJSON(t, &rec, "task", "submit", "--input", `{}`)
		e.ok(t, "task", "cancel", rec.Task.ID)
	}
}

// deliveries lists a subscription's deliveries in state (empty: all)
// through the binary, waiting until there are n of them.
func (e *cliEnv) deliveries(t *testing.T, sub, state string, n int) []deliveryJSON {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		args := []string{"sub", "deliveries", sub}
		if state != "" {
			args = append(args, "--state", state)
		}
		var page deliveryPage
		e.okJSON(t, &page, args...)
		if len(page.Items) == n {
			return page.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription %s has %d %s deliveries, want %d", sub, len(page.Items), state, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaseWithoutAck leases n deliveries of a subscription on an event
// connection and closes it without acknowledging them: with one attempt
// each, they become dead letters once their leases run out.
func (e *cliEnv) leaseWithoutAck(t *testing.T, subID string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := sdk.DialEvents(ctx, sdk.EventConnConfig{BaseURL: e.srv.URL, Token: e.cred.Token, SubscriptionID: subID, Capacity: n})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range n {
		if _, err := conn.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestO7_SubCommands: sub create, list, get, pause, resume, deliveries and
// the retry of one delivery, through the binary.
func TestO7_SubCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, shortLeases()...)

	var created subReceipt
	r := e.okJSON(t, &created, "sub", "create", "--name", "billing", "--queue", "orders", "--from-sequence", "0", "--max-attempts", "1",
		"--types", "task.cancelled,task.succeeded")
	s := created.Subscription
	if s.Name != "billing" || s.QueueID != e.cred.QueueID || s.MaxAttempts != 1 || created.Deduplicated {
		t.Fatalf("create: %+v", created)
	}
	var again subReceipt
	e.okJSON(t, &again, "sub", "create", "--name", "billing", "--queue", "orders", "--from-sequence", "0", "--max-attempts", "1",
		"--types", "task.cancelled,task.succeeded", "--idempotency-key", keyOf(t, r))
	if !again.Deduplicated || again.Subscription.ID != s.ID {
		t.Errorf("create repeated with its key: %+v", again)
	}

	r = e.ok(t, "sub", "list")
	if row := tableRow(t, r.stdout, s.ID); row[1] != "billing" || row[2] != "true" {
		t.Errorf("list row %v", row)
	}
	var byName, byID subJSON
	e.okJSON(t, &byName, "sub", "get", "billing")
	e.okJSON(t, &byID, "sub", "get", s.ID, "--queue", "orders")
	if byName.ID != s.ID || byID.ID != s.ID {
		t.Errorf("get by name %s, by id %s; want %s", byName.ID, byID.ID, s.ID)
	}

	var paused subReceipt
	r = e.okJSON(t, &paused, "sub", "pause", "billing", "--reason", "receiver maintenance")
	if paused.Subscription.Enabled || paused.Subscription.Revision != "2" {
		t.Errorf("pause: %+v", paused)
	}
	if !strings.Contains(r.stderr, "--expected-revision 1") {
		t.Errorf("pause does not print the revision it acted on: %s", r.stderr)
	}
	stale := e.run(t, "", "sub", "resume", "billing", "--reason", "done", "--expected-revision", "1")
	wantFail(t, stale, "STATE_CONFLICT")
	if !strings.Contains(stale.stderr, "changed since this command read it") {
		t.Errorf("a stale resume: %s", stale.stderr)
	}
	var resumed subReceipt
	e.okJSON(t, &resumed, "sub", "resume", "billing", "--reason", "maintenance done")
	if !resumed.Subscription.Enabled || resumed.Subscription.Revision != "3" {
		t.Errorf("resume: %+v", resumed)
	}

	e.results(t, 1)
	d := e.deliveries(t, "billing", "PENDING", 1)[0]
	r = e.ok(t, "sub", "deliveries", "billing")
	if row := tableRow(t, r.stdout, d.ID); row[2] != "PENDING" {
		t.Errorf("deliveries row %v", row)
	}
	r = e.ok(t, "sub", "deliveries", "billing", d.ID)
	if !strings.Contains(r.stdout, "event.type:") || !strings.Contains(r.stdout, "task.cancelled") || !strings.Contains(r.stdout, "delivery.state:") {
		t.Errorf("delivery detail:\n%s", r.stdout)
	}

	// A dead letter, retried on its own after a question.
	e.leaseWithoutAck(t, s.ID, 1)
	dead := e.deliveries(t, "billing", "EXPIRED", 1)[0]
	refused := e.run(t, "n\n", "sub", "retry", "billing", "--delivery", dead.ID, "--reason", "receiver fixed")
	wantFail(t, refused, "not confirmed")
	if !strings.Contains(refused.stderr, "retry delivery "+dead.ID) {
		t.Errorf("retry did not ask: %s", refused.stderr)
	}
	r = e.run(t, "y\n", "sub", "retry", "billing", "--delivery", dead.ID, "--reason", "receiver fixed", "--additional-attempts", "2", "-o", "json")
	if r.err != nil {
		t.Fatalf("retry: %v %s", r.err, r.stderr)
	}
	var retried struct{ Delivery deliveryJSON }
	if err := json.Unmarshal([]byte(r.stdout), &retried); err != nil || retried.Delivery.State != "PENDING" {
		t.Errorf("retry: %v %s", err, r.stdout)
	}
	wantFail(t, e.run(t, "", "sub", "retry", "billing", "--delivery", dead.ID, "--reason", "again", "--yes"), "STATE_CONFLICT")

	t.Run("BadInput", func(t *testing.T) {
		wantFail(t, e.run(t, "", "sub", "create", "--name", "-bad"), "--name")
		wantFail(t, e.run(t, "", "sub", "create", "--name", "x", "--types", "task.requeued"), "--types")
		wantFail(t, e.run(t, "", "sub", "create", "--name", "x", "--from-sequence", "01"), "--from-sequence")
		wantFail(t, e.run(t, "", "sub", "create", "--name", "x", "--max-pending", "5000"), "--max-pending")
		wantFail(t, e.run(t, "", "sub", "create", "--name", "billing"), "STATE_CONFLICT")
		wantFail(t, e.run(t, "", "sub", "pause", "billing"), "--reason")
		wantFail(t, e.run(t, "", "sub", "get", "nosuch"), "SUB")
		wantFail(t, e.run(t, "", "sub", "get", "no such"), "SUB")
		wantFail(t, e.run(t, "", "sub", "deliveries", "billing", "--state", "DONE"), "--state")
		wantFail(t, e.run(t, "", "sub", "deliveries", "billing", "--expired-reason", "LOST"), "--expired-reason")
		wantFail(t, e.run(t, "", "sub", "deliveries", "billing", "xyz"), "DELIVERY_ID")
		wantFail(t, e.run(t, "", "sub", "retry", "billing", "--reason", "x", "--additional-attempts", "0"), "--additional-attempts")
		wantFail(t, e.run(t, "", "sub", "retry", "billing", "--reason", "x", "--delivery", "nope"), "--delivery")
		wantFail(t, e.run(t, "", "sub", "retry", "billing", "--reason", "x", "--delivery", dead.ID, "--dry-run"), "--delivery")
		wantFail(t, e.run(t, "", "sub", "retry", "billing", "--reason", "x", "--to-sequence", "-1"), "--to-sequence")
		wantFail(t, e.run(t, "", "sub", "retry", "billing", "--reason", "x", "--expected-count", "0"), "--expected-count")
		wantFail(t, e.run(t, "", "sub", "replay", "billing", "--reason", "x", "--to-sequence", "3"), "--from-sequence")
		wantFail(t, e.run(t, "", "sub", "replay", "billing", "--reason", "x", "--from-sequence", "1"), "--to-sequence")
		wantFail(t, e.run(t, "", "sub", "skip", "billing", "--reason", "x", "--to-sequence", "tail"), "--to-sequence")
		wantFail(t, e.run(t, "", "sub", "skip", "billing", "--reason", "x"), "--to-sequence")
		wantFail(t, e.run(t, "", "sub", "delete", "billing"), "--reason")
	})
}
