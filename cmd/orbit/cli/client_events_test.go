//go:build linux

package cli_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestO7_EventsTail: orbit events tail prints deliveries and acknowledges
// them; with --no-ack it prints them and changes nothing.
func TestO7_EventsTail(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	var acked, watched subReceipt
	e.okJSON(t, &acked, "sub", "create", "--name", "drain", "--from-sequence", "0")
	e.okJSON(t, &watched, "sub", "create", "--name", "watch", "--from-sequence", "0")
	e.results(t, 2)
	e.deliveries(t, "drain", "PENDING", 2)
	e.deliveries(t, "watch", "PENDING", 2)

	r := e.ok(t, "events", "tail", "drain", "--count", "2")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SEQUENCE") {
		t.Fatalf("tail printed:\n%s", r.stdout)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); f[1] != "task.cancelled" || f[3] != "LEASED" {
			t.Errorf("tail row %v", f)
		}
	}
	if !strings.Contains(r.stderr, "acknowledged 2") {
		t.Errorf("tail summary: %s", r.stderr)
	}
	e.deliveries(t, "drain", "ACKED", 2)

	r = e.ok(t, "events", "tail", "watch", "--no-ack", "--count", "2", "--interval", "50ms", "-o", "json")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("tail --no-ack printed:\n%s", r.stdout)
	}
	for _, l := range lines {
		var row struct {
			Delivery deliveryJSON
			Event    struct{ Type, Sequence string }
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil || row.Delivery.State != "PENDING" || row.Event.Type != "task.cancelled" || row.Event.Sequence != row.Delivery.Sequence {
			t.Errorf("tail --no-ack line %s: %v", l, err)
		}
	}
	for _, d := range e.deliveries(t, "watch", "PENDING", 2) {
		if d.Attempts != 0 || d.Revision != "1" {
			t.Errorf("watching changed delivery %+v", d)
		}
	}

	wantFail(t, e.run(t, "", "events", "tail", "drain", "--capacity", "0"), "--capacity")
	wantFail(t, e.run(t, "", "events", "tail", "drain", "--count", "-1"), "--count")
	wantFail(t, e.run(t, "", "events", "tail", "nosuch"), "SUB")
}

// TestO7_SubBulkCommands: sub retry (K-7), replay (K-8), skip (K-9) and
// delete (K-11) through the binary. Each part runs once the server serves
// its endpoint.
func TestO7_SubBulkCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, shortLeases()...)
	var created subReceipt
	e.okJSON(t, &created, "sub", "create", "--name", "ledger", "--from-sequence", "0", "--max-attempts", "1")
	id := created.Subscription.ID

	t.Run("Retry", func(t *testing.T) {
		if !e.hasRoute(http.MethodPost, "/v1/subscriptions/{id}/deliveries:retry") {
			t.Skip("the server does not serve POST /v1/subscriptions/{id}/deliveries:retry (K-7) yet")
		}
		e.results(t, 2)
		e.deliveries(t, "ledger", "PENDING", 2)
		e.leaseWithoutAck(t, id, 2)
		e.deliveries(t, "ledger", "EXPIRED", 2)

		var dry struct {
			Matched json.RawMessage `json:"matched"`
			Sample  []string        `json:"sample"`
		}
		e.okJSON(t, &dry, "sub", "retry", "ledger", "--reason", "receiver fixed", "--dry-run")
		if strings.Trim(string(dry.Matched), `"`) != "2" || len(dry.Sample) != 2 {
			t.Errorf("dry run: %s %v", dry.Matched, dry.Sample)
		}
		e.deliveries(t, "ledger", "EXPIRED", 2) // a dry run changes nothing
		wantFail(t, e.run(t, "no\n", "sub", "retry", "ledger", "--reason", "receiver fixed"), "not confirmed")
		r := e.run(t, "y\n", "sub", "retry", "ledger", "--reason", "receiver fixed", "--additional-attempts", "3")
		if r.err != nil || !strings.Contains(r.stderr, "dry run: 2 match") || !strings.Contains(r.stderr, "retry 2 dead letters") {
			t.Fatalf("retry: %v\n%s\n%s", r.err, r.stdout, r.stderr)
		}
		e.deliveries(t, "ledger", "PENDING", 2)
		wantFail(t, e.run(t, "", "sub", "retry", "ledger", "--reason", "x", "--expected-count", "5", "--yes"), "STATE_CONFLICT")
	})
	t.Run("Replay", func(t *testing.T) {
		if !e.hasRoute(http.MethodPost, "/v1/subscriptions/{id}:replay") {
			t.Skip("the server does not serve POST /v1/subscriptions/{id}:replay (K-8) yet")
		}
		var s subReceipt
		e.okJSON(t, &s, "sub", "create", "--name", "replayer")
		e.results(t, 1)
		seq := e.deliveries(t, "replayer", "PENDING", 1)[0].Sequence
		e.ok(t, "events", "tail", "replayer", "--count", "1")
		e.deliveries(t, "replayer", "ACKED", 1)
		r := e.run(t, "", "sub", "replay", "replayer", "--from-sequence", seq, "--to-sequence", seq, "--reason", "rebuild", "--yes")
		if r.err != nil || !strings.Contains(r.stderr, "dry run: 1 match") {
			t.Fatalf("replay: %v\n%s\n%s", r.err, r.stdout, r.stderr)
		}
		e.deliveries(t, "replayer", "PENDING", 1)
	})
	t.Run("Skip", func(t *testing.T) {
		if !e.hasRoute(http.MethodPost, "/v1/subscriptions/{id}:skip") {
			t.Skip("the server does not serve POST /v1/subscriptions/{id}:skip (K-9) yet")
		}
		var s subReceipt
		e.okJSON(t, &s, "sub", "create", "--name", "skipper")
		e.results(t, 1)
		e.deliveries(t, "skipper", "PENDING", 1)
		var skipped subReceipt
		r := e.okJSON(t, &skipped, "sub", "skip", "skipper", "--to-sequence", "head", "--reason", "irrelevant")
		if skipped.Subscription.CursorSequence == "0" || !strings.Contains(r.stderr, "--expected-revision 1") {
			t.Errorf("skip: %+v\n%s", skipped, r.stderr)
		}
		e.deliveries(t, "skipper", "EXPIRED", 1)
		wantFail(t, e.run(t, "", "sub", "skip", "skipper", "--to-sequence", "head", "--reason", "x", "--expected-revision", "1"), "STATE_CONFLICT")
	})
	t.Run("Delete", func(t *testing.T) {
		if !e.hasRoute(http.MethodDelete, "/v1/subscriptions/{id}") {
			t.Skip("the server does not serve DELETE /v1/subscriptions/{id} (K-11) yet")
		}
		var s subReceipt
		e.okJSON(t, &s, "sub", "create", "--name", "doomed")
		wantFail(t, e.run(t, "\n", "sub", "delete", "doomed", "--reason", "replaced"), "not confirmed")
		e.ok(t, "sub", "get", s.Subscription.ID)
		r := e.run(t, "yes\n", "sub", "delete", "doomed", "--reason", "replaced")
		if r.err != nil {
			t.Fatalf("delete: %v %s", r.err, r.stderr)
		}
		wantFail(t, e.run(t, "", "sub", "get", s.Subscription.ID), "NOT_FOUND")
		var again subReceipt
		e.okJSON(t, &again, "sub", "create", "--name", "doomed")
		if again.Subscription.ID == s.Subscription.ID {
			t.Error("the name of a deleted subscription was not free again")
		}
	})
}
