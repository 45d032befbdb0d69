package integration_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
)

// eight receivers get the same event at once; the view
// advances once and the other seven find the committed record.
func TestR20_EightConcurrentIdenticalEventsAdvanceOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	taskID, raw := f.cancelled()

	const n = 8
	stores := make([]*inbox.Store, n)
	for i := range stores {
		// Each receiver instance has its own pool, as separate processes do.
		pool, err := openReceiver(env.receiverDSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		stores[i] = f.storeFor(pool, f.consumer, f.queueID)
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]inbox.Result, n)
		errs    = make([]error, n)
	)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = s.Apply(f.ctx, raw)
		}()
	}
	close(start)
	wg.Wait()

	fresh, dup := 0, 0
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Errorf("receiver %d: %v", i, errs[i])
		case results[i] == inbox.Result{Applied: true}:
			fresh++
		case results[i] == inbox.Result{Duplicate: true, Applied: true}:
			dup++
		default:
			t.Errorf("receiver %d: result %+v", i, results[i])
		}
	}
	if fresh != 1 || dup != n-1 {
		t.Fatalf("%d fresh and %d duplicate results, want 1 and %d", fresh, dup, n-1)
	}
	wantView(t, f.view(f.consumer, f.queueID, taskID), 2, eventID(t, raw), tasks.StateCancelled, 1)
	rows := f.inboxRows(f.consumer, f.queueID)
	if len(rows) != 1 || !rows[eventID(t, raw)].Applied {
		t.Fatalf("inbox rows = %+v, want the event once with applied=1", rows)
	}
}

// R-20 (R-13, R-17 "conflicting content"): the same event id with other
// content is a conflict; the original is kept and nothing changes.
func TestR20_ContentConflict(t *testing.T) {
	t.Parallel()
	f := setup(t)
	taskID, raw := f.cancelled()
	s := f.store()
	if res := f.apply(s, raw); res != (inbox.Result{Applied: true}) {
		t.Fatalf("first Apply = %+v, want applied", res)
	}
	inboxBefore := f.inboxRows(f.consumer, f.queueID)
	viewBefore := f.view(f.consumer, f.queueID, taskID)

	conflicting := edit(t, raw, func(ev map[string]any) {
		ev["details"].(map[string]any)["reason"] = tasks.ReasonWorkerCancelled
	})
	for _, store := range []*inbox.Store{s, f.store()} { // and again from a new Store of the same identity
		if _, err := store.Apply(f.ctx, conflicting); !errors.Is(err, inbox.ErrConflict) {
			t.Fatalf("Apply of other content under the same event id: %v, want ErrConflict", err)
		}
	}
	if after := f.inboxRows(f.consumer, f.queueID); !reflect.DeepEqual(after, inboxBefore) {
		t.Fatalf("inbox changed by a conflict:\nbefore %+v\nafter  %+v", inboxBefore, after)
	}
	if after := f.view(f.consumer, f.queueID, taskID); !reflect.DeepEqual(after, viewBefore) {
		t.Fatalf("view changed by a conflict:\nbefore %+v\nafter  %+v", viewBefore, after)
	}
	// The original still deduplicates.
	if res := f.apply(s, raw); res != (inbox.Result{Duplicate: true, Applied: true}) {
		t.Fatalf("original after the conflict = %+v, want duplicate", res)
	}
}

// key order, whitespace and the time zone of occurred_at do not
// make another event; the reformatted copy is a duplicate, not a conflict.
func TestR11_ReformattedEventIsADuplicate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, raw := f.cancelled()
	s := f.store()
	f.apply(s, raw)

	ev := decode(t, raw)
	at, err := time.Parse(time.RFC3339Nano, ev["occurred_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	ev["occurred_at"] = at.In(time.FixedZone("", 8*3600)).Format(time.RFC3339Nano)
	reformatted, err := json.MarshalIndent(ev, "", "\t") // map keys sorted: another order than the struct's
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(reformatted, raw) || !bytes.Contains(reformatted, []byte("+08:00")) {
		t.Fatalf("the copy is not reformatted: %s", reformatted)
	}
	if res := f.apply(s, reformatted); res != (inbox.Result{Duplicate: true, Applied: true}) {
		t.Fatalf("reformatted copy = %+v, want duplicate", res)
	}
}

// an older task version is recorded without advancing
// the view; consumer name and queue each scope the Inbox; an event of
// another queue is refused.
func TestR20_OldVersionAndScopeIsolation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Two real results of one task: needs_review at revision 3, then a
	// review settles it as succeeded at revision 4.
	task, review := f.completed(tasks.OutcomeNeedsReview, []byte(`{"checked":false}`))
	succeeded := f.reviewed(task, []byte(`{"checked":true}`))
	reviewID, succeededID := eventID(t, review), eventID(t, succeeded)
	s := f.store()

	t.Run("OlderVersionDoesNotOverwrite", func(t *testing.T) {
		f := f.sub(t)
		if res := f.apply(s, succeeded); res != (inbox.Result{Applied: true}) {
			t.Fatalf("revision 4 = %+v, want applied", res)
		}
		if res := f.apply(s, review); res != (inbox.Result{Applied: false}) {
			t.Fatalf("revision 3 after 4 = %+v, want recorded, not applied", res)
		}
		wantView(t, f.view(f.consumer, f.queueID, task.ID), 4, succeededID, tasks.StateSucceeded, 1)
		rows := f.inboxRows(f.consumer, f.queueID)
		if len(rows) != 2 || !rows[succeededID].Applied || rows[reviewID].Applied {
			t.Fatalf("inbox rows = %+v, want revision 4 applied and revision 3 kept with applied=0", rows)
		}
		// Applied reports what the first receipt did.
		if res := f.apply(s, review); res != (inbox.Result{Duplicate: true, Applied: false}) {
			t.Fatalf("repeat of revision 3 = %+v, want duplicate, not applied", res)
		}
	})

	t.Run("OtherConsumerIsIndependent", func(t *testing.T) {
		f := f.sub(t)
		other := newConsumer()
		o := f.storeFor(env.receiver, other, f.queueID)
		if res := f.apply(o, review); res != (inbox.Result{Applied: true}) {
			t.Fatalf("revision 3 for another consumer = %+v, want applied", res)
		}
		if res := f.apply(o, succeeded); res != (inbox.Result{Applied: true}) {
			t.Fatalf("revision 4 for another consumer = %+v, want applied", res)
		}
		wantView(t, f.view(other, f.queueID, task.ID), 4, succeededID, tasks.StateSucceeded, 2)
		wantView(t, f.view(f.consumer, f.queueID, task.ID), 4, succeededID, tasks.StateSucceeded, 1)
	})

	t.Run("OtherQueueIsIndependent", func(t *testing.T) {
		f := f.sub(t)
		// The same event id under another queue is another Inbox key.
		otherQueue := db.NewID()
		moved := edit(t, succeeded, func(ev map[string]any) { snapshot(t, ev)["queue_id"] = otherQueue })
		if res := f.apply(f.storeFor(env.receiver, f.consumer, otherQueue), moved); res != (inbox.Result{Applied: true}) {
			t.Fatalf("same event id in another queue = %+v, want applied", res)
		}
		wantView(t, f.view(f.consumer, otherQueue, task.ID), 4, succeededID, tasks.StateSucceeded, 1)
		wantView(t, f.view(f.consumer, f.queueID, task.ID), 4, succeededID, tasks.StateSucceeded, 1)
	})

	t.Run("EventOfAnotherQueueIsRefused", func(t *testing.T) {
		f := f.sub(t)
		consumer, queue := newConsumer(), db.NewID()
		if _, err := f.storeFor(env.receiver, consumer, queue).Apply(f.ctx, succeeded); !errors.Is(err, inbox.ErrWrongQueue) {
			t.Fatalf("Apply of another queue's event: %v, want ErrWrongQueue", err)
		}
		if in, views := f.rowCounts(consumer); in != 0 || views != 0 {
			t.Fatalf("a refused event left %d inbox and %d view rows", in, views)
		}
	})
}

// the same task version under another event id is a conflict that
// rolls back everything, the new Inbox record included.
func TestR14_SameVersionDifferentEventIsConflict(t *testing.T) {
	t.Parallel()
	f := setup(t)
	taskID, raw := f.cancelled()
	s := f.store()
	f.apply(s, raw)
	viewBefore := f.view(f.consumer, f.queueID, taskID)

	otherID := db.NewID()
	other := edit(t, raw, func(ev map[string]any) { ev["id"] = otherID })
	for range 2 { // a second try must meet the same conflict, not a committed record
		if _, err := s.Apply(f.ctx, other); !errors.Is(err, inbox.ErrConflict) {
			t.Fatalf("same task version from event %s: %v, want ErrConflict", otherID, err)
		}
	}
	rows := f.inboxRows(f.consumer, f.queueID)
	if _, ok := rows[otherID]; ok || len(rows) != 1 {
		t.Fatalf("inbox rows = %+v, want only the first event", rows)
	}
	if after := f.view(f.consumer, f.queueID, taskID); !reflect.DeepEqual(after, viewBefore) {
		t.Fatalf("view changed by a conflict:\nbefore %+v\nafter  %+v", viewBefore, after)
	}
}

// a competing transaction's uncommitted Inbox record is never taken
// as success: Apply waits for it, and applies the event itself when that
// transaction rolls back, or deduplicates when it commits.
func TestR12_UncommittedRecordIsWaitedFor(t *testing.T) {
	t.Parallel()
	for _, outcome := range []string{"Rollback", "Commit"} {
		t.Run(outcome, func(t *testing.T) { // not parallel: one poller of INNODB_TRX at a time
			f := setup(t)
			taskID, raw := f.cancelled()
			_, canonical, digest, err := inbox.Parse(raw, f.queueID)
			if err != nil {
				t.Fatal(err)
			}
			// The competitor: an open transaction holding the Inbox record.
			competitor, err := env.receiver.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer competitor.Rollback()
			if _, err := competitor.ExecContext(f.ctx, `INSERT INTO receiver_inbox
				(consumer_name, queue_id, event_id, event_sha256, event_json, applied, received_at)
				VALUES (?, ?, ?, ?, ?, 1, UTC_TIMESTAMP(6))`,
				f.consumer, f.queueID, eventID(t, raw), digest, string(canonical)); err != nil {
				t.Fatal(err)
			}

			// The receiver, on a pool of one connection whose id we know.
			pool, err := openReceiver(env.receiverDSN)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			pool.SetMaxOpenConns(1)
			var threadID int64
			if err := pool.QueryRowContext(f.ctx, "SELECT CONNECTION_ID()").Scan(&threadID); err != nil {
				t.Fatal(err)
			}
			type applied struct {
				res inbox.Result
				err error
			}
			receiver := f.storeFor(pool, f.consumer, f.queueID)
			done := make(chan applied, 1)
			go func() {
				res, err := receiver.Apply(f.ctx, raw)
				done <- applied{res, err}
			}()
			waitForLockWait(t, f, threadID, done)

			var got applied
			switch outcome {
			case "Rollback":
				if err := competitor.Rollback(); err != nil {
					t.Fatal(err)
				}
				got = <-done
				if got.err != nil || got.res != (inbox.Result{Applied: true}) {
					t.Fatalf("Apply after the competitor rolled back = %+v, %v; want applied", got.res, got.err)
				}
				wantView(t, f.view(f.consumer, f.queueID, taskID), 2, eventID(t, raw), tasks.StateCancelled, 1)
			case "Commit":
				if err := competitor.Commit(); err != nil {
					t.Fatal(err)
				}
				got = <-done
				if got.err != nil || got.res != (inbox.Result{Duplicate: true, Applied: true}) {
					t.Fatalf("Apply after the competitor committed = %+v, %v; want duplicate", got.res, got.err)
				}
				if v := f.view(f.consumer, f.queueID, taskID); v != nil {
					t.Fatalf("a duplicate advanced the view: %+v", v)
				}
			}
		})
	}
}

// lockWaitPoll is how often waitForLockWait looks. The server refreshes
// information_schema.INNODB_TRX only when nobody read it for 100 ms, so a
// faster poll would keep reading a stale copy.
const lockWaitPoll = 150 * time.Millisecond

// waitForLockWait returns once the connection threadID waits for a row
// lock. It fails the test if Apply returns first (it did not wait) or the
// test's time runs out. Only one test may poll at a time (see lockWaitPoll).
func waitForLockWait[T any](t *testing.T, f *fixture, threadID int64, done <-chan T) {
	t.Helper()
	tick := time.NewTicker(lockWaitPoll)
	defer tick.Stop()
	for {
		var waiting int
		if err := env.receiver.QueryRowContext(f.ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX
			WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'`, threadID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case got := <-done:
			t.Fatalf("Apply returned without waiting for the uncommitted record: %+v", got)
		case <-f.ctx.Done():
			t.Fatal("Apply never waited for the competing record")
		case <-tick.C:
		}
	}
}

// R-20 (R-15, R-17 "business update fails"): when the business update
// fails, the whole transaction rolls back (no Inbox record, no view row)
// and the same event succeeds once the fault is removed.
//
// Not parallel with the other tests: CREATE TRIGGER needs an exclusive
// metadata lock on a shared table, which would queue behind, and then
// block, the open transaction that TestR12 holds on purpose.
func TestR20_BusinessFailureRollsBackWhole(t *testing.T) {
	// The fault is a trigger that refuses one consumer's updates, on the
	// view (the business update) or on the Inbox (marking it applied,
	// after the view was already advanced in the transaction).
	for _, table := range []string{"receiver_task_views", "receiver_inbox"} {
		t.Run(table, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			taskID, raw := f.cancelled()
			trigger := "fault_" + db.NewID()[:16]
			drop := func() {
				// Also a cleanup, when the test's context has ended.
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				if _, err := env.receiver.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+trigger); err != nil {
					t.Errorf("drop trigger: %v", err)
				}
			}
			t.Cleanup(drop)
			if _, err := env.receiver.ExecContext(f.ctx, fmt.Sprintf(`CREATE TRIGGER %s BEFORE UPDATE ON %s FOR EACH ROW
				BEGIN
					IF NEW.consumer_name = '%s' THEN
						SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected business failure';
					END IF;
				END`, trigger, table, f.consumer)); err != nil {
				t.Fatal(err)
			}

			s := f.store()
			for range 2 { // retrying while the fault lasts changes nothing either
				if _, err := s.Apply(f.ctx, raw); err == nil || !strings.Contains(err.Error(), "injected business failure") {
					t.Fatalf("Apply during the fault: %v, want the business failure", err)
				}
				if in, views := f.rowCounts(f.consumer); in != 0 || views != 0 {
					t.Fatalf("a failed transaction left %d inbox and %d view rows", in, views)
				}
			}

			drop()
			if res := f.apply(s, raw); res != (inbox.Result{Applied: true}) {
				t.Fatalf("Apply after the fault = %+v, want applied", res)
			}
			wantView(t, f.view(f.consumer, f.queueID, taskID), 2, eventID(t, raw), tasks.StateCancelled, 1)
		})
	}
}

// NEEDS_REVIEW stays to be checked; results keep their exact text,
// big integers included; no result is SQL NULL.
func TestR16_NeedsReviewAndResultsKeepPrecision(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.store()

	t.Run("NeedsReviewStaysNeedsReview", func(t *testing.T) {
		f := f.sub(t)
		task, raw := f.completed(tasks.OutcomeNeedsReview, []byte(`{"charged":"unknown"}`))
		f.apply(s, raw)
		wantView(t, f.view(f.consumer, f.queueID, task.ID), 3, eventID(t, raw), tasks.StateNeedsReview, 1)
	})

	t.Run("BigIntegerKeepsItsText", func(t *testing.T) {
		f := f.sub(t)
		const result = `{"amount":12345678901234567890123}`
		task, raw := f.completed(tasks.OutcomeSucceeded, []byte(result))
		f.apply(s, raw)
		wantView(t, f.view(f.consumer, f.queueID, task.ID), 3, eventID(t, raw), tasks.StateSucceeded, 1)
		if got := f.lastResult(task.ID); got == nil || *got != result {
			t.Fatalf("last_result = %v, want exactly %s", deref(got), result)
		}
	})

	t.Run("NoResultIsNull", func(t *testing.T) {
		f := f.sub(t)
		taskID, raw := f.cancelled()
		if strings.Contains(string(raw), `"result"`) {
			t.Fatalf("a cancelled waiting task's event carries a result: %s", raw)
		}
		f.apply(s, raw)
		if got := f.lastResult(taskID); got != nil {
			t.Fatalf("last_result = %q, want SQL NULL", *got)
		}
	})

	t.Run("NullResultIsNull", func(t *testing.T) {
		f := f.sub(t)
		taskID, raw := f.cancelled()
		raw = edit(t, raw, func(ev map[string]any) { snapshot(t, ev)["result"] = nil })
		f.apply(s, raw)
		if got := f.lastResult(taskID); got != nil {
			t.Fatalf("last_result = %q, want SQL NULL", *got)
		}
	})
}

// lastResult reads last_result with SQL, so that NULL is told from text.
func (f *fixture) lastResult(taskID string) *string {
	f.t.Helper()
	var result *string
	if err := env.receiver.QueryRowContext(f.ctx, `SELECT last_result FROM receiver_task_views
		WHERE consumer_name = ? AND queue_id = ? AND task_id = ?`, f.consumer, f.queueID, taskID).Scan(&result); err != nil {
		f.t.Fatal(err)
	}
	return result
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// the Inbox keeps the event as delivered, frozen in canonical
// form with its SHA-256, and the UTC time it was received; the snapshot is
// never rebuilt from the task's later state.
func TestR10_InboxKeepsFrozenEventDigestAndUTCTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	task, review := f.completed(tasks.OutcomeNeedsReview, []byte(`{"step":1}`))
	f.reviewed(task, []byte(`{"step":2}`)) // the task moves on before the event is received

	before := time.Now().UTC().Truncate(time.Microsecond)
	f.apply(f.store(), review)
	after := time.Now().UTC()

	row, ok := f.inboxRows(f.consumer, f.queueID)[eventID(t, review)]
	if !ok {
		t.Fatal("no inbox row")
	}
	canonical, err := inbox.Canonicalize(review)
	if err != nil {
		t.Fatal(err)
	}
	if row.EventJSON != string(canonical) {
		t.Fatalf("event_json = %s\nwant the delivered event %s", row.EventJSON, canonical)
	}
	sum := sha256.Sum256([]byte(row.EventJSON))
	if row.Digest != hex.EncodeToString(sum[:]) {
		t.Fatalf("event_sha256 = %s, want the SHA-256 of event_json", row.Digest)
	}
	if row.ReceivedAt.Before(before) || row.ReceivedAt.After(after) {
		t.Fatalf("received_at = %s, want a UTC time between %s and %s", row.ReceivedAt, before, after)
	}
	if got := f.lastResult(task.ID); got == nil || *got != `{"step":1}` {
		t.Fatalf("last_result = %s, want the event's own result {\"step\":1}", deref(got))
	}
	wantView(t, f.view(f.consumer, f.queueID, task.ID), 3, eventID(t, review), tasks.StateNeedsReview, 1)
}

// refused events touch nothing.
func TestR11_RefusedEventsTouchNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, raw := f.cancelled()
	otherID := db.NewID()
	cases := map[string]struct {
		raw  []byte
		want error
	}{
		"InvalidJSON":   {raw[:len(raw)-1], inbox.ErrInvalidEvent},
		"DuplicateKey":  {append([]byte(`{"type":"task.cancelled",`), raw[1:]...), inbox.ErrInvalidEvent},
		"NestedDupKey":  {bytes.Replace(raw, []byte(`"snapshot":{`), []byte(`"snapshot":{"state":"CANCELLED",`), 1), inbox.ErrInvalidEvent},
		"InvalidUTF8":   {bytes.Replace(raw, []byte(`"reason":"`), []byte("\"reason\":\"\xff"), 1), inbox.ErrInvalidEvent},
		"LoneSurrogate": {bytes.Replace(raw, []byte(`"reason":"`), []byte(`"reason":"\udc00`), 1), inbox.ErrInvalidEvent},
		"Oversized": {edit(t, raw, func(ev map[string]any) {
			ev["details"].(map[string]any)["note"] = strings.Repeat("x", inbox.MaxEventBytes)
		}), inbox.ErrInvalidEvent},
		"TypeAndStateDisagree": {edit(t, raw, func(ev map[string]any) { ev["type"] = tasks.EventSucceeded }), inbox.ErrInvalidEvent},
		"NotAResultType":       {edit(t, raw, func(ev map[string]any) { ev["type"] = tasks.EventRequeued }), inbox.ErrInvalidEvent},
		"AggregateIsOtherTask": {edit(t, raw, func(ev map[string]any) { ev["aggregate_id"] = otherID }), inbox.ErrInvalidEvent},
		"AggregateIsNotATask":  {edit(t, raw, func(ev map[string]any) { ev["aggregate_kind"] = "queue" }), inbox.ErrInvalidEvent},
		"RevisionDisagrees":    {edit(t, raw, func(ev map[string]any) { ev["aggregate_revision"] = "3" }), inbox.ErrInvalidEvent},
		"OtherQueue":           {edit(t, raw, func(ev map[string]any) { snapshot(t, ev)["queue_id"] = otherID }), inbox.ErrWrongQueue},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := f.sub(t)
			consumer := newConsumer()
			s := f.storeFor(env.receiver, consumer, f.queueID)
			if _, err := s.Apply(f.ctx, c.raw); !errors.Is(err, c.want) {
				t.Fatalf("Apply: %v, want %v", err, c.want)
			}
			if in, views := f.rowCounts(consumer); in != 0 || views != 0 {
				t.Fatalf("a refused event left %d inbox and %d view rows", in, views)
			}
			// The genuine event is still accepted afterwards in that scope.
			if res := f.apply(s, raw); res != (inbox.Result{Applied: true}) {
				t.Fatalf("genuine event after a refusal = %+v, want applied", res)
			}
		})
	}
}
