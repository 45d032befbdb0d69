package subscriptions_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// appendEvents appends n task.cancelled events straight into the log of
// c's queue, in chunks, and returns the new head. Only a test writes the
// log this way: it makes thousands of events in a moment.
func (e *env) appendEvents(t *testing.T, c servertest.Credential, n int) uint64 {
	t.Helper()
	ctx := context.Background()
	var head uint64
	for start := 0; start < n; start += 1000 {
		err := db.Tx(ctx, e.srv.DB, func(tx *sql.Tx) error {
			head = 0
			err := tx.QueryRowContext(ctx, `SELECT head_sequence FROM queue_streams WHERE queue_id = ? FOR UPDATE`, c.QueueID).Scan(&head)
			if err == sql.ErrNoRows {
				_, err = tx.ExecContext(ctx, `INSERT INTO queue_streams (queue_id, head_sequence, updated_at) VALUES (?, 0, ?)`, c.QueueID, db.Now())
			}
			if err != nil {
				return err
			}
			var values []string
			var args []any
			for i := 0; i < 1000 && start+i < n; i++ {
				head++
				values = append(values, "(?, ?, ?, ?, ?, 2, ?, '{}', '{}')")
				args = append(args, c.QueueID, head, db.NewID(), tasks.EventCancelled, db.NewID(), db.Now())
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO result_events (queue_id, sequence, id, type, task_id, task_revision, occurred_at, details, snapshot)
				VALUES `+strings.Join(values, ","), args...); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `UPDATE queue_streams SET head_sequence = ? WHERE queue_id = ?`, head, c.QueueID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return head
}

// deadLetters inserts an EXPIRED delivery (one attempt made, budget one,
// ATTEMPTS_EXHAUSTED) of subscription s for every event of its queue in
// [from, to]: the dead letters a consumer that failed them all leaves.
func (e *env) deadLetters(t *testing.T, s subscriptions.SubscriptionView, from, to uint64) {
	t.Helper()
	for lo := from; lo <= to; lo += 1000 {
		hi := min(lo+999, to)
		_, err := e.srv.DB.Exec(`INSERT INTO event_deliveries (id, subscription_id, queue_id, event_id, sequence, revision, state,
			created_at, available_at, lease_epoch, attempts, attempt_budget, expired_reason, last_error)
			SELECT MD5(CONCAT(?, sequence)), ?, queue_id, id, sequence, 3, 'EXPIRED', ?, ?, 1, 1, 1, 'ATTEMPTS_EXHAUSTED', 'LEASE_EXPIRED'
			FROM result_events WHERE queue_id = ? AND sequence BETWEEN ? AND ?`,
			s.ID, s.ID, db.Now(), db.Now(), s.QueueID, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// countState counts a subscription's deliveries in state (and, when given,
// with expired_reason) straight from the table.
func (e *env) countState(t *testing.T, subID, state, reason string) int {
	t.Helper()
	q := `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = ?`
	args := []any{subID, state}
	if reason != "" {
		q += ` AND expired_reason = ?`
		args = append(args, reason)
	}
	var n int
	if err := e.srv.DB.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// operations counts the audited operations of a subscription.
func (e *env) operations(t *testing.T, subID string) int {
	t.Helper()
	var n int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscription_operations WHERE subscription_id = ?`, subID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type dryRun struct {
	Matched int      `json:"matched"`
	Sample  []string `json:"sample"`
}

type operationReceipt struct {
	Operation    subscriptions.Operation `json:"operation"`
	Deduplicated bool                    `json:"deduplicated"`
}

func decodeInto[T any](t *testing.T, r *servertest.Response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	return v
}

// drain claims and acknowledges every claimable delivery of a subscription
// with a session of capacity 32, and returns how many it acknowledged.
func (e *env) drain(t *testing.T, c servertest.Credential, subID string) int {
	t.Helper()
	ctx := context.Background()
	session := e.session(t, c, subID, 32)
	grant := e.grant(t, session)
	total := 0
	for {
		leases := e.claim(t, session)
		if len(leases) == 0 {
			return total
		}
		acks := make([]*subscriptions.DeliveryAckParams, len(leases))
		for i, l := range leases {
			acks[i] = &subscriptions.DeliveryAckParams{Grant: grant, SubscriptionID: subID, DeliveryID: l.Delivery.ID,
				Epoch: l.Delivery.LeaseEpoch, Secret: l.Secret, SessionID: session}
		}
		outcomes, err := e.mod.DeliveryAckBatch(ctx, acks)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outcomes {
			if o.Err != nil {
				t.Fatalf("ack: %v", o.Err)
			}
		}
		total += len(leases)
	}
}

// TestK7_BulkRetryOfTenThousandDeadLetters: a dry run counts the dead
// letters and samples them; a wrong expected_count changes nothing; more
// than 10,000 is refused until the range is narrowed; the confirmed retry
// moves exactly the 10,000 in one audited operation, a replay of its key
// returns the original receipt, and every one of them is then delivered.
func TestK7_BulkRetryOfTenThousandDeadLetters(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "bulk")
	head := e.appendEvents(t, c, 10_001)
	s := e.create(t, c, createBody(c.QueueID, "bulk", `,"max_attempts":1`))
	e.deadLetters(t, s, 1, head)
	path := "/v1/subscriptions/" + s.ID + "/deliveries:retry"
	body := func(extra string) string {
		return `{"filter":{"state":"EXPIRED","expired_reason":"ATTEMPTS_EXHAUSTED"` + extra + `},"additional_attempts":1,"reason":"downstream fixed"`
	}

	dry := e.post(t, c, path, "", body(`,"to_sequence":"10000"`)+`,"dry_run":true}`)
	wantStatus(t, dry, http.StatusOK)
	wantMembers(t, "dry run", dry.Data, "matched", "sample")
	d := decodeInto[dryRun](t, dry)
	if d.Matched != 10_000 || len(d.Sample) != 10 {
		t.Fatalf("dry run matched %d with %d samples, want 10000 and 10", d.Matched, len(d.Sample))
	}
	if v := e.subscription(t, c, s.ID); v.DeadLetters != 10_001 || v.BlockedReason == nil || *v.BlockedReason != "BACKLOG_FULL" {
		t.Errorf("dead_letters %d, blocked_reason %v; want 10001 and BACKLOG_FULL", v.DeadLetters, v.BlockedReason)
	}

	t.Run("WrongCountChangesNothing", func(t *testing.T) {
		r := e.post(t, c, path, newKey(), body(`,"to_sequence":"10000"`)+`,"expected_count":9999}`)
		wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
		if !strings.Contains(string(r.Body), "10000") {
			t.Errorf("the conflict does not name the actual count: %s", r.Body)
		}
		if n := e.countState(t, s.ID, "EXPIRED", ""); n != 10_001 || e.operations(t, s.ID) != 0 {
			t.Errorf("after a refused retry: %d EXPIRED, %d operations", n, e.operations(t, s.ID))
		}
	})
	t.Run("MoreThanTheBound", func(t *testing.T) {
		r := e.post(t, c, path, newKey(), body("")+`,"expected_count":10001}`)
		wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
		r = e.post(t, c, path, newKey(), body("")+`,"expected_count":10000}`)
		wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
	})
	t.Run("NeedsIdempotencyKey", func(t *testing.T) {
		r := e.post(t, c, path, "", body(`,"to_sequence":"10000"`)+`,"expected_count":10000}`)
		wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
	})

	key := newKey()
	confirm := body(`,"to_sequence":"10000"`) + `,"expected_count":10000}`
	first := e.post(t, c, path, key, confirm)
	wantStatus(t, first, http.StatusOK)
	op := decodeInto[operationReceipt](t, first).Operation
	if op.Count != 10_000 || op.Kind != "RETRY" || op.SubscriptionID != s.ID {
		t.Fatalf("receipt %s", first.Body)
	}
	wantReplay(t, first, e.post(t, c, path, key, confirm))
	if n := e.countState(t, s.ID, "PENDING", ""); n != 10_000 {
		t.Fatalf("%d PENDING after the retry, want 10000", n)
	}
	var audited int
	var filter string
	if err := e.srv.DB.QueryRow(`SELECT count, filter FROM subscription_operations WHERE subscription_id = ?`, s.ID).Scan(&audited, &filter); err != nil {
		t.Fatal(err)
	}
	if audited != 10_000 || !strings.Contains(filter, `"to_sequence":"10000"`) || !strings.Contains(filter, "ATTEMPTS_EXHAUSTED") {
		t.Errorf("audit records count %d, filter %s", audited, filter)
	}
	var cleared, budget2 int
	if err := e.srv.DB.QueryRow(`SELECT SUM(expired_reason IS NULL), SUM(attempt_budget = 2 AND attempts = 1 AND lease_epoch = 1)
		FROM event_deliveries WHERE subscription_id = ? AND state = 'PENDING'`, s.ID).Scan(&cleared, &budget2); err != nil {
		t.Fatal(err)
	}
	if cleared != 10_000 || budget2 != 10_000 {
		t.Errorf("retried deliveries: %d without expired_reason, %d with budget 2 and attempts and epoch kept", cleared, budget2)
	}

	if n := e.drain(t, c, s.ID); n != 10_000 {
		t.Fatalf("delivered %d, want 10000", n)
	}
	if n := e.countState(t, s.ID, "ACKED", ""); n != 10_000 {
		t.Errorf("%d ACKED, want 10000", n)
	}
	if n := e.countState(t, s.ID, "EXPIRED", ""); n != 1 {
		t.Errorf("%d EXPIRED, want the one outside the range", n)
	}
}

// TestK7_BulkRetryInput: bad input is 400, a subscription of another
// credential 404, a missing permission 403; the dry run and the receipt
// of the documentation come from here.
func TestK7_BulkRetryInput(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "bulk-input")
	s, _ := e.expired(t, c, "input")
	path := "/v1/subscriptions/" + s.ID + "/deliveries:retry"
	for _, b := range []string{
		`{}`,
		`{"filter":{},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"ACKED"},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED","expired_reason":"TIRED"},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED","from_sequence":"5","to_sequence":"4"},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED","from_sequence":5},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED"},"additional_attempts":0,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"","dry_run":true}`,
		`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"r"}`,
		`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"r","expected_count":-1}`,
		`{"filter":{"state":"EXPIRED","extra":1},"additional_attempts":1,"reason":"r","dry_run":true}`,
		`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"r","dry_run":true,"x":1}`,
	} {
		wantError(t, e.post(t, c, path, newKey(), b), http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	good := `{"filter":{"state":"EXPIRED"},"additional_attempts":2,"reason":"downstream fixed","dry_run":true}`
	other := e.cred(t, "ns", "bulk-input-other")
	other = e.credOn(t, other, c.QueueID)
	wantError(t, e.post(t, other, path, newKey(), good), http.StatusNotFound, "NOT_FOUND")
	reader := e.srv.Credential(t, servertest.CredentialParams{Namespace: "ns", Queue: "bulk-input", Permissions: []string{auth.PermEventsRead}})
	wantError(t, e.post(t, reader, path, newKey(), good), http.StatusForbidden, "PERMISSION_DENIED")

	dry := e.post(t, c, path, "", good)
	wantStatus(t, dry, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-retry-bulk-dry-run-response", dry.Body)
	r := e.post(t, c, path, newKey(), `{"filter":{"state":"EXPIRED"},"additional_attempts":2,"reason":"downstream fixed","expected_count":1}`)
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-retry-bulk-response", r.Body)
	if n := e.countState(t, s.ID, "PENDING", ""); n != 1 {
		t.Errorf("%d PENDING after the retry, want 1", n)
	}
}

// TestK8_ReplayOfAcknowledgedEvents: a replay re-opens ACKED deliveries of
// a range as PENDING, with attempts kept, budget topped up and the lease
// epoch continuing; the proof that acknowledged a delivery no longer
// does; a range below the retention mark is 410.
func TestK8_ReplayOfAcknowledgedEvents(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "replay")
	s := e.create(t, c, createBody(c.QueueID, "replay", `,"max_attempts":3`))
	e.cancelledN(t, c, 3)
	e.waitPending(t, c, s.ID, 3)
	session := e.session(t, c, s.ID, 3)
	leases := e.claim(t, session)
	if len(leases) != 3 {
		t.Fatalf("claimed %d", len(leases))
	}
	for _, l := range leases {
		e.ack(t, s.ID, session, l)
	}
	path := "/v1/subscriptions/" + s.ID + ":replay"

	dry := e.post(t, c, path, "", `{"from_sequence":"1","to_sequence":"2","reason":"rebuild the read model","dry_run":true}`)
	wantStatus(t, dry, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-replay-dry-run-response", dry.Body)
	if d := decodeInto[dryRun](t, dry); d.Matched != 2 {
		t.Fatalf("dry run matched %d, want 2", d.Matched)
	}
	wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"1","to_sequence":"2","reason":"r","expected_count":3}`), http.StatusConflict, "STATE_CONFLICT")
	wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"2","to_sequence":"1","reason":"r","dry_run":true}`), http.StatusBadRequest, "INVALID_ARGUMENT")
	wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"1","to_sequence":"99","reason":"r","dry_run":true}`), http.StatusBadRequest, "INVALID_ARGUMENT")
	wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"1","reason":"r","dry_run":true}`), http.StatusBadRequest, "INVALID_ARGUMENT")

	key := newKey()
	body := `{"from_sequence":"1","to_sequence":"2","reason":"rebuild the read model","expected_count":2}`
	r := e.post(t, c, path, key, body)
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-replay-response", r.Body)
	wantReplay(t, r, e.post(t, c, path, key, body))
	for _, l := range leases[:2] {
		d := e.delivery(t, c, s.ID, l.Delivery.ID)
		if d.State != "PENDING" || d.Attempts != 1 || d.AttemptBudget != 4 || d.LeaseEpoch != 1 || d.AcknowledgedAt != "" {
			t.Errorf("replayed delivery %+v", d)
		}
		// The proof that acknowledged it does not acknowledge it again.
		_, err := subscriptions.DeliveryAck(context.Background(), e.srv.DB, e.srv.Authenticator(t), &subscriptions.DeliveryAckParams{
			Grant: e.grant(t, session), SubscriptionID: s.ID, DeliveryID: l.Delivery.ID, Epoch: l.Delivery.LeaseEpoch, Secret: l.Secret, SessionID: session,
		})
		if err != subscriptions.ErrLeaseLost {
			t.Errorf("the old proof after a replay: %v, want DELIVERY_LEASE_LOST", err)
		}
	}
	if d := e.delivery(t, c, s.ID, leases[2].Delivery.ID); d.State != "ACKED" {
		t.Errorf("delivery outside the range is %s", d.State)
	}
	again := e.claim(t, session)
	if len(again) != 2 || again[0].Delivery.LeaseEpoch != 2 {
		t.Fatalf("redelivered %d, want the 2 replayed at epoch 2", len(again))
	}
	for _, l := range again {
		if res := e.ack(t, s.ID, session, l); res.Deduplicated {
			t.Errorf("second ACK of a replayed delivery is deduplicated")
		}
	}

	t.Run("BelowTheRetentionMark", func(t *testing.T) {
		if _, err := e.srv.DB.Exec(`UPDATE queue_streams SET retention_mark = 2 WHERE queue_id = ?`, c.QueueID); err != nil {
			t.Fatal(err)
		}
		wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"1","to_sequence":"3","reason":"r","dry_run":true}`), http.StatusGone, "EVENT_HISTORY_EXPIRED")
		wantError(t, e.post(t, c, path, newKey(), `{"from_sequence":"1","to_sequence":"3","reason":"r","expected_count":3}`), http.StatusGone, "EVENT_HISTORY_EXPIRED")
		if v := e.subscription(t, c, s.ID); v.RedeliveryHorizon != 2 {
			t.Errorf("redelivery_horizon %d, want 2", v.RedeliveryHorizon)
		}
	})
}

// TestK9_Skip: a skip moves the cursor forward over unread events, turns
// the PENDING deliveries up to it into EXPIRED SKIPPED, lets LEASED ones
// finish without being delivered again, never moves the cursor back, and
// repairs a subscription stopped by EVENT_HISTORY_EXPIRED.
func TestK9_Skip(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "skip")
	s := e.create(t, c, createBody(c.QueueID, "skip", `,"max_attempts":5`))
	e.cancelledN(t, c, 3)
	e.waitPending(t, c, s.ID, 3)
	session, l := e.claimOne(t, c, s.ID) // sequence 1 LEASED; 2 and 3 PENDING
	e.configure(t, c, s.ID, false)       // paused: events 4 and 5 stay unread
	e.cancelledN(t, c, 2)
	path := "/v1/subscriptions/" + s.ID + ":skip"

	wantError(t, e.post(t, c, path, newKey(), `{"to_sequence":"head","expected_revision":"1","reason":"r"}`), http.StatusConflict, "STATE_CONFLICT")
	for _, b := range []string{
		`{"to_sequence":"tail","expected_revision":"2","reason":"r"}`, `{"to_sequence":3,"expected_revision":"2","reason":"r"}`,
		`{"to_sequence":"99","expected_revision":"2","reason":"r"}`, `{"expected_revision":"2","reason":"r"}`,
		`{"to_sequence":"head","expected_revision":"2"}`, `{"to_sequence":"head","expected_revision":"2","reason":"r","x":1}`,
	} {
		wantError(t, e.post(t, c, path, newKey(), b), http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	r := e.post(t, c, path, newKey(), `{"to_sequence":"head","expected_revision":"2","reason":"poison batch"}`)
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-skip-response", r.Body)
	rc := decodeInto[struct {
		Subscription subscriptions.SubscriptionView `json:"subscription"`
		Operation    subscriptions.Operation        `json:"operation"`
	}](t, r)
	if rc.Subscription.CursorSequence != 5 || rc.Subscription.Revision != 3 || rc.Operation.Count != 2 || rc.Operation.Kind != "SKIP" {
		t.Fatalf("skip receipt %s", r.Body)
	}
	if n := e.countState(t, s.ID, "EXPIRED", "SKIPPED"); n != 2 {
		t.Errorf("%d SKIPPED, want 2", n)
	}
	if d := e.delivery(t, c, s.ID, l.Delivery.ID); d.State != "LEASED" {
		t.Errorf("the leased delivery is %s, want LEASED until its lease ends", d.State)
	}
	// Its lease runs out: it expires as SKIPPED instead of coming back.
	e.expireLease(t, l.Delivery.ID)
	e.recoverLeases(t, s.ID)
	if n := e.countState(t, s.ID, "EXPIRED", "SKIPPED"); n != 3 {
		t.Errorf("%d SKIPPED after the lease ran out, want 3", n)
	}
	e.configure(t, c, s.ID, true)
	if got := e.claim(t, session); len(got) != 0 {
		t.Errorf("claimed %d deliveries after the skip", len(got))
	}

	t.Run("NeverBackward", func(t *testing.T) {
		r := e.post(t, c, path, newKey(), `{"to_sequence":"1","expected_revision":"4","reason":"r"}`)
		wantStatus(t, r, http.StatusOK)
		if v := decodeReceipt(t, r).Subscription; v.CursorSequence != 5 {
			t.Errorf("cursor %d after skipping to 1, want 5", v.CursorSequence)
		}
	})
	t.Run("RepairsHistoryExpired", func(t *testing.T) {
		c := e.cred(t, "ns", "skip-history")
		s := e.create(t, c, createBody(c.QueueID, "history", ""))
		e.configure(t, c, s.ID, false)
		e.appendEvents(t, c, 10)
		if _, err := e.srv.DB.Exec(`UPDATE queue_streams SET retention_mark = 6 WHERE queue_id = ?`, c.QueueID); err != nil {
			t.Fatal(err)
		}
		e.configure(t, c, s.ID, true)
		v := e.subscription(t, c, s.ID)
		if v.BlockedReason == nil || *v.BlockedReason != "HISTORY_EXPIRED" || v.Lag != 10 || v.RedeliveryHorizon != 6 {
			t.Fatalf("before the skip: %+v", v)
		}
		wantError(t, e.post(t, c, "/v1/subscriptions/"+s.ID+":skip", newKey(), `{"to_sequence":"4","expected_revision":"3","reason":"r"}`), http.StatusGone, "EVENT_HISTORY_EXPIRED")
		wantStatus(t, e.post(t, c, "/v1/subscriptions/"+s.ID+":skip", newKey(), `{"to_sequence":"5","expected_revision":"3","reason":"purged"}`), http.StatusOK)
		v = e.waitCursor(t, c, s.ID, 10)
		if v.BlockedReason != nil && *v.BlockedReason != "NO_CONSUMER" {
			t.Errorf("after the skip blocked_reason is %s", *v.BlockedReason)
		}
	})
}

// TestK10_WhyASubscriptionDoesNotMove: blocked_reason, lag,
// oldest_pending_age_ms and dead_letters, on GET, on lists and from
// Module.SubscriptionStats for several subscriptions at once.
func TestK10_WhyASubscriptionDoesNotMove(t *testing.T) {
	t.Parallel()
	e := start(t, func(cfg *subscriptions.Config) { cfg.NoConsumerAfter = 200 * time.Millisecond })
	c := e.cred(t, "ns", "progress")
	reason := func(v subscriptions.SubscriptionView) string {
		if v.BlockedReason == nil {
			return ""
		}
		return *v.BlockedReason
	}
	idle := e.create(t, c, createBody(c.QueueID, "idle", ""))
	if v := e.subscription(t, c, idle.ID); reason(v) != "" || v.Lag != 0 || v.DeadLetters != 0 || v.OldestPendingAgeMS != 0 || v.RedeliveryHorizon != 1 {
		t.Errorf("new subscription: %+v", v)
	}
	full := e.create(t, c, createBody(c.QueueID, "full", `,"max_pending":1`))
	paused := e.create(t, c, createBody(c.QueueID, "paused", ""))
	e.configure(t, c, paused.ID, false)
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, idle.ID, 2)
	e.waitPending(t, c, full.ID, 1)

	if v := e.subscription(t, c, paused.ID); reason(v) != "PAUSED" || v.Lag != 2 {
		t.Errorf("paused: %s, lag %d", reason(v), v.Lag)
	}
	if v := e.subscription(t, c, full.ID); reason(v) != "BACKLOG_FULL" || v.Lag != 2 {
		t.Errorf("full: %s, lag %d", reason(v), v.Lag)
	}
	v := e.waitSubscription(t, c, idle.ID, "without consumer", func(v subscriptions.SubscriptionView) bool {
		return reason(v) == "NO_CONSUMER" && v.OldestPendingAgeMS >= 100
	})
	if v.Lag != 2 {
		t.Errorf("idle: lag %d, oldest_pending_age_ms %d", v.Lag, v.OldestPendingAgeMS)
	}
	// A connected consumer whose deliveries all wait for a retry.
	e.session(t, c, idle.ID, 1)
	if _, err := e.srv.DB.Exec(`UPDATE event_deliveries SET available_at = ? WHERE subscription_id = ?`, db.Now().Add(time.Hour), idle.ID); err != nil {
		t.Fatal(err)
	}
	if v := e.subscription(t, c, idle.ID); reason(v) != "RETRY_WAIT" {
		t.Errorf("delayed: %s", reason(v))
	}
	// An expired delivery is a dead letter.
	if _, err := e.srv.DB.Exec(`UPDATE event_deliveries SET state = 'EXPIRED' WHERE subscription_id = ? AND sequence = 1`, idle.ID); err != nil {
		t.Fatal(err)
	}
	v = e.subscription(t, c, idle.ID)
	if v.DeadLetters != 1 || v.Lag != 1 {
		t.Errorf("dead_letters %d, lag %d; want 1 and 1", v.DeadLetters, v.Lag)
	}
	r := e.get(t, c, "/v1/subscriptions/"+idle.ID)
	doctest.Check(t, docPath, "subscriptions-progress-response", r.Body)

	stats, err := e.mod.SubscriptionStats(context.Background(), []string{idle.ID, full.ID, paused.ID, db.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 3 || stats[paused.ID].BlockedReason != "PAUSED" || stats[full.ID].Pending != 1 ||
		stats[idle.ID].DeadLetters != 1 || stats[idle.ID].Pending != 1 || stats[idle.ID].Lag != 1 {
		t.Errorf("stats %+v", stats)
	}
	page := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID))
	for _, item := range page.Items {
		if item.ID == full.ID && reason(item) != "BACKLOG_FULL" {
			t.Errorf("listed full subscription: %+v", item)
		}
	}
}

// TestK11_Delete: a deletion needs the current revision and a key; it
// frees the name and the slot at once, answers 404 afterwards, replays its
// receipt, keeps the audit and removes the deliveries in the background.
func TestK11_Delete(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "delete")
	s := e.create(t, c, createBody(c.QueueID, "gone", ""))
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, s.ID, 2)
	path := "/v1/subscriptions/" + s.ID
	del := func(c servertest.Credential, key, body string) *servertest.Response {
		return e.srv.Do(t, servertest.Request{Method: http.MethodDelete, Path: path, Token: c.Token, IdempotencyKey: key, Body: body})
	}
	for _, b := range []string{`{}`, `{"expected_revision":"1"}`, `{"expected_revision":"1","reason":""}`, `{"expected_revision":"1","reason":"r","x":1}`} {
		wantError(t, del(c, newKey(), b), http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	wantError(t, del(c, "", `{"expected_revision":"1","reason":"r"}`), http.StatusBadRequest, "INVALID_ARGUMENT")
	wantError(t, del(c, newKey(), `{"expected_revision":"2","reason":"r"}`), http.StatusConflict, "STATE_CONFLICT")
	other := e.credOn(t, e.cred(t, "ns", "delete-other"), c.QueueID)
	wantError(t, del(other, newKey(), `{"expected_revision":"1","reason":"r"}`), http.StatusNotFound, "NOT_FOUND")
	reader := e.srv.Credential(t, servertest.CredentialParams{Namespace: "ns", Queue: "delete", Permissions: []string{auth.PermEventsRead}})
	wantError(t, del(reader, newKey(), `{"expected_revision":"1","reason":"r"}`), http.StatusForbidden, "PERMISSION_DENIED")

	key, body := newKey(), `{"expected_revision":"1","reason":"replaced by a new pipeline"}`
	first := del(c, key, body)
	wantStatus(t, first, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-delete-response", first.Body)
	wantReplay(t, first, del(c, key, body))
	wantError(t, del(c, newKey(), body), http.StatusNotFound, "NOT_FOUND")
	wantError(t, e.get(t, c, path), http.StatusNotFound, "NOT_FOUND")
	wantError(t, e.get(t, c, path+"/deliveries"), http.StatusNotFound, "NOT_FOUND")
	var reason string
	if err := e.srv.DB.QueryRow(`SELECT reason FROM subscription_deletions WHERE subscription_id = ?`, s.ID).Scan(&reason); err != nil || reason != "replaced by a new pipeline" {
		t.Errorf("deletion record: %q %v", reason, err)
	}
	// The name is free again.
	again := e.create(t, c, createBody(c.QueueID, "gone", ""))
	if again.ID == s.ID {
		t.Fatal("the new subscription reuses the id")
	}
	// The deliveries go in the background.
	deadline := time.Now().Add(waitBound)
	for e.countState(t, s.ID, "PENDING", "") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted subscription's deliveries were not removed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("FreesTheSlot", func(t *testing.T) {
		c := e.cred(t, "full-ns", "delete-slot")
		var last subscriptions.SubscriptionView
		for i := range subscriptions.MaxSubscriptionsPerNamespace {
			last = e.create(t, c, createBody(c.QueueID, fmt.Sprintf("s%d", i), ""))
		}
		wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "one-more", "")), http.StatusConflict, "SUBSCRIPTION_LIMIT")
		r := e.srv.Do(t, servertest.Request{Method: http.MethodDelete, Path: "/v1/subscriptions/" + last.ID, Token: c.Token, IdempotencyKey: newKey(), Body: `{"expected_revision":"1","reason":"make room"}`})
		wantStatus(t, r, http.StatusOK)
		e.create(t, c, createBody(c.QueueID, "one-more", ""))
	})
}

// TestK14_StuckDeliveries: LEASED deliveries leased longer ago than
// older_than_ms, with the session holding them.
func TestK14_StuckDeliveries(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "stuck")
	s := e.create(t, c, createBody(c.QueueID, "stuck", ""))
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, s.ID, 2)
	session, l := e.claimOne(t, c, s.ID)
	path := "/v1/subscriptions/" + s.ID + "/deliveries"
	r := e.get(t, c, path+"?state=LEASED&older_than_ms=0")
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "subscriptions-stuck-deliveries-response", r.Body)
	var page struct {
		Items []subscriptions.StuckDeliveryView `json:"items"`
	}
	if err := json.Unmarshal(r.Data, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].ID != l.Delivery.ID || page.Items[0].LeaseSessionID != session || page.Items[0].LeasedAt == "" {
		t.Fatalf("stuck deliveries %s", r.Body)
	}
	if err := json.Unmarshal(e.get(t, c, path+"?state=LEASED&older_than_ms=60000").Data, &page); err != nil || len(page.Items) != 0 {
		t.Errorf("a lease of a moment ago is listed as older than a minute: %v %+v", err, page.Items)
	}
	for _, q := range []string{"?older_than_ms=0", "?state=PENDING&older_than_ms=0", "?state=LEASED&older_than_ms=-1",
		"?state=LEASED&older_than_ms=01", "?state=LEASED&older_than_ms=", "?state=LEASED&older_than_ms=99999999999999"} {
		wantError(t, e.get(t, c, path+q), http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	other := e.credOn(t, e.cred(t, "ns", "stuck-other"), c.QueueID)
	wantError(t, e.get(t, other, path+"?state=LEASED&older_than_ms=0"), http.StatusNotFound, "NOT_FOUND")
	if ids := ids(e.deliveries(t, c, s.ID)); !slices.Contains(ids, l.Delivery.ID) {
		t.Errorf("plain list lost the leased delivery")
	}
}
