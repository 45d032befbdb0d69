package subscriptions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// history makes a one-attempt subscription on c's queue with five
// deliveries, each materialised on its own, in every state:
// sequence 1 ACKED, 2 EXPIRED, 3 LEASED, 4 and 5 PENDING.
func history(t *testing.T, e *env, c servertest.Credential, name string) subscriptions.SubscriptionView {
	t.Helper()
	s := e.create(t, c, createBody(c.QueueID, name, `,"max_attempts":1`))
	for i := 1; i <= 5; i++ {
		e.cancelled(t, c)
		e.waitPending(t, c, s.ID, i)
	}
	session := e.session(t, c, s.ID, 3)
	leases := e.claim(t, session)
	if len(leases) != 3 || leases[0].Delivery.Sequence != 1 || leases[1].Delivery.Sequence != 2 {
		t.Fatalf("claimed %d leases, want sequences 1-3 in order", len(leases))
	}
	e.ack(t, s.ID, session, leases[0])
	e.expireLease(t, leases[1].Delivery.ID)
	e.recoverLeases(t, s.ID)
	return s
}

func TestS17_ListDeliveries(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "deliveries")
	s := history(t, e, c, "history")
	path := "/v1/subscriptions/" + s.ID + "/deliveries"

	t.Run("NewestFirst", func(t *testing.T) {
		r := e.get(t, c, path)
		doctest.Check(t, docPath, "subscriptions-deliveries-response", r.Body)
		p := decodeDeliveryPage(t, r)
		var seqs []uint64
		var states []string
		for _, d := range p.Items {
			seqs, states = append(seqs, uint64(d.Sequence)), append(states, d.State)
		}
		if !slices.Equal(seqs, []uint64{5, 4, 3, 2, 1}) || p.NextCursor != "" {
			t.Fatalf("sequences %v (next_cursor %q), want 5 to 1 and no cursor", seqs, p.NextCursor)
		}
		if !slices.Equal(states, []string{"PENDING", "PENDING", "LEASED", "EXPIRED", "ACKED"}) {
			t.Errorf("states %v", states)
		}
		if !newestFirst(t, func(i int) string { return p.Items[i].CreatedAt }, func(i int) string { return p.Items[i].ID }, len(p.Items)) {
			t.Errorf("not ordered by created_at, id descending: %+v", p.Items)
		}
	})
	t.Run("StateFilter", func(t *testing.T) {
		for state, want := range map[string][]uint64{
			"PENDING": {4, 5}, "LEASED": {3}, "EXPIRED": {2}, "ACKED": {1},
		} {
			p := decodeDeliveryPage(t, e.get(t, c, path+"?state="+state))
			if got := sequences(p.Items); !slices.Equal(got, want) {
				t.Errorf("state=%s: sequences %v, want %v", state, got, want)
			}
			for _, d := range p.Items {
				if d.State != state {
					t.Errorf("state=%s lists a %s delivery", state, d.State)
				}
			}
		}
	})
	t.Run("Pages", func(t *testing.T) {
		all := ids(decodeDeliveryPage(t, e.get(t, c, path)).Items)
		for _, tc := range []struct {
			query string
			sizes []int
			want  []string
		}{
			{"?limit=2", []int{2, 2, 1}, all},
			{"?limit=1&state=PENDING", []int{1, 1}, all[:2]},
		} {
			var got []string
			var sizes []int
			cursor := ""
			for {
				q := path + tc.query
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				p := decodeDeliveryPage(t, e.get(t, c, q))
				got, sizes = append(got, ids(p.Items)...), append(sizes, len(p.Items))
				if cursor = p.NextCursor; cursor == "" || len(sizes) > 10 {
					break
				}
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(sizes, tc.sizes) {
				t.Errorf("%s: pages %v hold %v, want %v holding %v", tc.query, sizes, got, tc.sizes, tc.want)
			}
		}
	})
	t.Run("CursorIsBound", func(t *testing.T) {
		pending := decodeDeliveryPage(t, e.get(t, c, path+"?limit=1&state=PENDING")).NextCursor
		unfiltered := decodeDeliveryPage(t, e.get(t, c, path+"?limit=1")).NextCursor
		other := e.create(t, c, createBody(c.QueueID, "other", ""))
		for _, q := range []string{
			path + "?state=ACKED&cursor=" + pending,
			path + "?cursor=" + pending,
			path + "?state=PENDING&cursor=" + unfiltered,
			"/v1/subscriptions/" + other.ID + "/deliveries?state=PENDING&cursor=" + pending,
			"/v1/subscriptions/" + other.ID + "/deliveries?cursor=" + unfiltered,
			"/v1/subscriptions?queue_id=" + c.QueueID + "&cursor=" + unfiltered,
		} {
			wantError(t, e.get(t, c, q), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		sc := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID+"&limit=1")).NextCursor
		wantError(t, e.get(t, c, path+"?cursor="+sc), http.StatusBadRequest, "INVALID_ARGUMENT")
		// An edited time outside the years 1 to 9999 is malformed, not a
		// failed query.
		for _, q := range []string{
			path + "?state=PENDING&cursor=" + servertest.CursorWithTime(t, pending, 253402300800),
			path + "?cursor=" + servertest.CursorWithTime(t, unfiltered, 253402300800),
			"/v1/subscriptions?queue_id=" + c.QueueID + "&limit=1&cursor=" + servertest.CursorWithTime(t, sc, 253402300800),
		} {
			wantError(t, e.get(t, c, q), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		// The same list goes on.
		if p := decodeDeliveryPage(t, e.get(t, c, path+"?state=PENDING&cursor="+pending)); len(p.Items) != 1 {
			t.Errorf("second PENDING page: %d items", len(p.Items))
		}
	})
	t.Run("Parameters", func(t *testing.T) {
		for _, q := range []string{"?state=pending", "?state=DONE", "?state=ALL", "?limit=0", "?limit=101", "?limit=1.0", "?cursor=x"} {
			wantError(t, e.get(t, c, path+q), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.get(t, c, "/v1/subscriptions/0123456789abcdef0123456789abcdef/deliveries"), http.StatusNotFound, "NOT_FOUND")
	})
}

// deliveryOf returns the one delivery of a subscription.
func (e *env) deliveryOf(t *testing.T, c servertest.Credential, subID string) (json.RawMessage, subscriptions.DeliveryView) {
	t.Helper()
	r := e.get(t, c, "/v1/subscriptions/"+subID+"/deliveries")
	var p struct{ Items []json.RawMessage }
	if err := json.Unmarshal(r.Data, &p); err != nil || len(p.Items) != 1 {
		t.Fatalf("want exactly one delivery: %v %s", err, r.Body)
	}
	var d subscriptions.DeliveryView
	if err := json.Unmarshal(p.Items[0], &d); err != nil {
		t.Fatal(err)
	}
	return p.Items[0], d
}

func TestS18_DeliveryObject(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "object")
	s := e.create(t, c, createBody(c.QueueID, "object", `,"max_attempts":2`))
	e.cancelled(t, c)
	e.waitPending(t, c, s.ID, 1)
	event := e.events(t, c.QueueID)[0]
	var (
		id          string
		lastSession string
		lastLease   subscriptions.Lease
	)

	// step checks the delivery after a transition: its members, state,
	// revision, lease epoch, attempts and budget, and that its id never
	// changes.
	step := func(t *testing.T, state string, revision, epoch uint64, attempts, budget int) subscriptions.DeliveryView {
		t.Helper()
		raw, d := e.deliveryOf(t, c, s.ID)
		want := slices.Clone(deliveryMembers)
		switch state {
		case subscriptions.StateLeased:
			want = append(want, "lease_until")
		case subscriptions.StateAcked:
			want = append(want, "acknowledged_at")
		case subscriptions.StateExpired:
			want = append(want, "expired_reason")
		}
		if revision >= 3 {
			// From the first recovery on, last_error is LEASE_EXPIRED (K-6).
			want = append(want, "last_error")
		}
		m := wantMembers(t, state+" delivery", raw, want...)
		for _, k := range []string{"sequence", "revision", "lease_epoch"} {
			if !decimalPattern.Match(m[k]) {
				t.Errorf("%s = %s, want a decimal string", k, m[k])
			}
		}
		for _, k := range []string{"created_at", "available_at", "lease_until", "acknowledged_at"} {
			if v, ok := m[k]; ok && !timePattern.Match(v) {
				t.Errorf("%s = %s, want an RFC 3339 UTC time", k, v)
			}
		}
		if id == "" {
			id = d.ID
		}
		if d.ID != id || d.SubscriptionID != s.ID || d.EventID != event.ID || d.Sequence != event.Sequence {
			t.Errorf("identity changed: %+v; want id %s of event %s", d, id, event.ID)
		}
		if d.State != state || uint64(d.Revision) != revision || uint64(d.LeaseEpoch) != epoch || d.Attempts != attempts || d.AttemptBudget != budget {
			t.Errorf("got %s revision %d epoch %d attempts %d budget %d; want %s %d %d %d %d",
				d.State, d.Revision, d.LeaseEpoch, d.Attempts, d.AttemptBudget, state, revision, epoch, attempts, budget)
		}
		return d
	}
	lease := func(t *testing.T) {
		t.Helper()
		session, l := e.claimOne(t, c, s.ID)
		lastSession, lastLease = session, l
	}
	expire := func(t *testing.T) {
		t.Helper()
		e.expireLease(t, id)
		e.recoverLeases(t, s.ID)
	}

	t.Run("Materialised", func(t *testing.T) {
		d := step(t, "PENDING", 1, 0, 0, 2)
		if d.CreatedAt != d.AvailableAt {
			t.Errorf("created_at %s, available_at %s: want equal", d.CreatedAt, d.AvailableAt)
		}
	})
	t.Run("Leased", func(t *testing.T) {
		lease(t)
		d := step(t, "LEASED", 2, 1, 1, 2)
		until, _ := time.Parse(time.RFC3339Nano, d.LeaseUntil)
		if time.Until(until) < 30*time.Second {
			t.Errorf("lease_until %s, want about a minute ahead", d.LeaseUntil)
		}
	})
	t.Run("RecoveredToPending", func(t *testing.T) {
		expire(t)
		d := step(t, "PENDING", 3, 1, 1, 2)
		created, _ := time.Parse(time.RFC3339Nano, d.CreatedAt)
		available, _ := time.Parse(time.RFC3339Nano, d.AvailableAt)
		if !available.After(created) {
			t.Errorf("available_at %s after recovery, want the time of recovery (after created_at %s)", d.AvailableAt, d.CreatedAt)
		}
	})
	t.Run("LeasedAgain", func(t *testing.T) {
		lease(t)
		step(t, "LEASED", 4, 2, 2, 2)
	})
	t.Run("RecoveredToExpired", func(t *testing.T) {
		expire(t)
		step(t, "EXPIRED", 5, 2, 2, 2)
	})
	t.Run("Retried", func(t *testing.T) {
		r := e.post(t, c, "/v1/subscriptions/"+s.ID+"/deliveries/"+id+":retry", newKey(), `{"expected_revision":"5","reason":"fixed","additional_attempts":1}`)
		wantStatus(t, r, http.StatusOK)
		step(t, "PENDING", 6, 2, 2, 3)
	})
	t.Run("LeasedAThirdTime", func(t *testing.T) {
		lease(t)
		step(t, "LEASED", 7, 3, 3, 3)
	})
	t.Run("Acked", func(t *testing.T) {
		e.ack(t, s.ID, lastSession, lastLease)
		step(t, "ACKED", 8, 3, 3, 3)
	})
}

func TestS19_DeliveryDetail(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "detail")
	// As in the seed: twelve results before the subscription, the
	// thirteenth is delivered.
	e.cancelledN(t, c, 12)
	s := e.create(t, c, createBody(c.QueueID, "object-results", ""))
	twin := e.create(t, c, createBody(c.QueueID, "twin", ""))
	e.cancelled(t, c)
	e.waitPending(t, c, s.ID, 1)
	_, lease := e.claimOne(t, c, s.ID)
	path := "/v1/subscriptions/" + s.ID + "/deliveries/" + lease.Delivery.ID

	t.Run("DeliveryAndEvent", func(t *testing.T) {
		r := e.get(t, c, path)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "subscriptions-delivery-response", r.Body)
		m := wantMembers(t, "detail", r.Data, "delivery", "event")
		listed, _ := e.deliveryOf(t, c, s.ID)
		wantJSON(t, "delivery", m["delivery"], string(listed))
		ev, err := tasks.EventGet(context.Background(), e.srv.DB, c.QueueID, lease.Delivery.EventID)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(ev)
		wantJSON(t, "event", m["event"], string(want))
		em := wantMembers(t, "event", m["event"], "id", "sequence", "type", "aggregate_kind", "aggregate_id",
			"aggregate_revision", "occurred_at", "details", "snapshot")
		wantJSON(t, "sequence", em["sequence"], `"13"`)
		wantJSON(t, "type", em["type"], `"task.cancelled"`)
		wantJSON(t, "details", em["details"], `{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}`)
	})
	t.Run("NoSecret", func(t *testing.T) {
		for _, p := range []string{path, "/v1/subscriptions/" + s.ID + "/deliveries"} {
			body := e.get(t, c, p).Body
			for _, leak := range []string{lease.Secret, "secret", "digest", "session", "token"} {
				if bytes.Contains(bytes.ToLower(body), []byte(strings.ToLower(leak))) {
					t.Errorf("%s contains %q: %s", p, leak, body)
				}
			}
		}
	})
	t.Run("OtherSubscriptionsDelivery", func(t *testing.T) {
		_, theirs := e.deliveryOf(t, c, twin.ID)
		if theirs.EventID != lease.Delivery.EventID || theirs.ID == lease.Delivery.ID {
			t.Fatalf("the twin's delivery %+v should be another delivery of the same event", theirs)
		}
		const unknown = "0123456789abcdef0123456789abcdef"
		base := "/v1/subscriptions/" + s.ID + "/deliveries/"
		r := e.get(t, c, base+theirs.ID)
		wantError(t, r, http.StatusNotFound, "NOT_FOUND")
		if m := e.get(t, c, base+unknown); m.Code() != "NOT_FOUND" || m.Error.Message != r.Error.Message {
			t.Errorf("another subscription's delivery answers %q, an unknown one %s", r.Error.Message, m.Body)
		}
		wantError(t, e.post(t, c, base+theirs.ID+":retry", newKey(), `{"expected_revision":"1","reason":"r","additional_attempts":1}`), http.StatusNotFound, "NOT_FOUND")
		for _, bad := range []string{strings.ToUpper(theirs.ID), theirs.ID[:31], "x"} {
			wantError(t, e.get(t, c, base+bad), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("EventPurgedAfterAck", func(t *testing.T) {
		pc := e.cred(t, "ns", "purged")
		ps := e.create(t, pc, createBody(pc.QueueID, "purged", ""))
		e.cancelled(t, pc)
		e.waitPending(t, pc, ps.ID, 1)
		session, l := e.claimOne(t, pc, ps.ID)
		e.ack(t, ps.ID, session, l)
		purge(t, e, pc.QueueID, 1)
		r := e.get(t, pc, "/v1/subscriptions/"+ps.ID+"/deliveries/"+l.Delivery.ID)
		wantError(t, r, http.StatusGone, "EVENT_HISTORY_EXPIRED")
		// The delivery itself stays in the history.
		if _, d := e.deliveryOf(t, pc, ps.ID); d.State != subscriptions.StateAcked {
			t.Errorf("listed delivery is %s, want ACKED", d.State)
		}
	})
}

func TestS20_UnmaterialisedResultsHaveNoDelivery(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "unmaterialised")
	control := e.create(t, c, createBody(c.QueueID, "control", ""))
	full := e.create(t, c, createBody(c.QueueID, "full", `,"max_pending":1`))
	paused := e.create(t, c, createBody(c.QueueID, "paused", ""))
	e.configure(t, c, paused.ID, false)
	e.cancelledN(t, c, 3)
	e.waitCursor(t, c, control.ID, 3)

	t.Run("FullBacklog", func(t *testing.T) {
		s := e.waitPending(t, c, full.ID, 1)
		if s.CursorSequence != 1 {
			t.Errorf("full backlog: cursor %d, want 1 (before the first event that did not fit)", s.CursorSequence)
		}
		if got := sequences(e.deliveries(t, c, full.ID)); !slices.Equal(got, []uint64{1}) {
			t.Errorf("deliveries %v, want only sequence 1", got)
		}
	})
	t.Run("Paused", func(t *testing.T) {
		if ds := e.deliveries(t, c, paused.ID); len(ds) != 0 {
			t.Errorf("a paused subscription lists %d deliveries, want none", len(ds))
		}
	})
	t.Run("RoomMaterialisesTheNext", func(t *testing.T) {
		session, l := e.claimOne(t, c, full.ID)
		e.ack(t, full.ID, session, l)
		e.waitCursor(t, c, full.ID, 2)
		if got := sequences(e.deliveries(t, c, full.ID)); !slices.Equal(got, []uint64{1, 2}) {
			t.Errorf("deliveries %v, want 1 (ACKED) and 2", got)
		}
	})
}

func TestS21_RetryAnExpiredDelivery(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "retry")
	s, d := e.expired(t, c, "retried")
	path := "/v1/subscriptions/" + s.ID + "/deliveries/" + d.ID + ":retry"
	key := newKey()
	body := `{
  "expected_revision": "3",
  "reason": "receiver persistence failure repaired",
  "additional_attempts": 2
}`
	before := e.subscription(t, c, s.ID)
	first := e.post(t, c, path, key, body)
	wantStatus(t, first, http.StatusOK)

	t.Run("Receipt", func(t *testing.T) {
		doctest.Check(t, docPath, "subscriptions-retry-request", []byte(body))
		doctest.Check(t, docPath, "subscriptions-retry-response", first.Body)
		m := wantMembers(t, "retry receipt", first.Data, "delivery", "deduplicated")
		wantJSON(t, "deduplicated", m["deduplicated"], `false`)
		// The lease that ran out left last_error LEASE_EXPIRED (K-6).
		wantMembers(t, "retried delivery", m["delivery"], append(slices.Clone(deliveryMembers), "last_error")...)
		var got subscriptions.DeliveryView
		json.Unmarshal(m["delivery"], &got)
		if got.ID != d.ID || got.EventID != d.EventID || got.State != "PENDING" || got.Revision != 4 ||
			got.Attempts != 1 || got.AttemptBudget != 3 || got.LeaseEpoch != 1 {
			t.Errorf("retried: %+v; want the same delivery PENDING at revision 4, attempts 1, budget 3, epoch 1", got)
		}
		if after := e.subscription(t, c, s.ID); after.PendingCount != before.PendingCount || after.PendingCount != 1 {
			t.Errorf("pending_count %d before, %d after; want 1 both", before.PendingCount, after.PendingCount)
		}
	})
	t.Run("Replay", func(t *testing.T) {
		// The delivery changes after the retry: the replay still shows
		// the receipt and adds nothing.
		session, l := e.claimOne(t, c, s.ID)
		if l.Delivery.ID != d.ID || l.Delivery.LeaseEpoch != 2 || l.Delivery.Attempts != 2 {
			t.Fatalf("lease after the retry: %+v", l.Delivery)
		}
		replay := e.post(t, c, path, key, "{\"additional_attempts\":2,\"reason\":\"receiver persistence failure repaired\",\"expected_revision\":\"3\"}")
		wantReplay(t, first, replay)
		if got := e.delivery(t, c, s.ID, d.ID); got.AttemptBudget != 3 || got.State != "LEASED" {
			t.Errorf("after the replay: %+v; want budget 3, LEASED", got)
		}
		var n int
		e.srv.DB.QueryRow(`SELECT COUNT(*) FROM delivery_retries WHERE delivery_id = ?`, d.ID).Scan(&n)
		if n != 1 {
			t.Errorf("%d audited retries, want 1", n)
		}
		wantError(t, e.post(t, c, path, key, `{"expected_revision":"3","reason":"other","additional_attempts":2}`), http.StatusConflict, "IDEMPOTENCY_CONFLICT")

		t.Run("OnlyExpired", func(t *testing.T) {
			r := e.post(t, c, path, newKey(), `{"expected_revision":"5","reason":"again","additional_attempts":1}`)
			wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
			doctest.Check(t, docPath, "subscriptions-retry-conflict-response", r.Body)
			e.ack(t, s.ID, session, l)
			wantError(t, e.post(t, c, path, newKey(), `{"expected_revision":"6","reason":"again","additional_attempts":1}`), http.StatusConflict, "STATE_CONFLICT")
		})
	})
	t.Run("PendingIsNotExpired", func(t *testing.T) {
		ps := e.create(t, c, createBody(c.QueueID, "pending", ""))
		e.cancelled(t, c)
		e.waitPending(t, c, ps.ID, 1)
		_, pd := e.deliveryOf(t, c, ps.ID)
		wantError(t, e.post(t, c, "/v1/subscriptions/"+ps.ID+"/deliveries/"+pd.ID+":retry", newKey(), `{"expected_revision":"1","reason":"r","additional_attempts":1}`), http.StatusConflict, "STATE_CONFLICT")
	})

	s2, d2 := e.expired(t, c, "budget")
	path2 := "/v1/subscriptions/" + s2.ID + "/deliveries/" + d2.ID + ":retry"
	t.Run("Invalid", func(t *testing.T) {
		for _, b := range []string{
			`{"expected_revision":"3","reason":"r","additional_attempts":0}`,
			`{"expected_revision":"3","reason":"r","additional_attempts":101}`,
			`{"expected_revision":"3","reason":"r","additional_attempts":-1}`,
			`{"expected_revision":"3","reason":"r","additional_attempts":"2"}`,
			`{"expected_revision":"3","reason":"r","additional_attempts":2.5}`,
			`{"expected_revision":"3","reason":"r"}`,
			`{"expected_revision":"3","additional_attempts":1}`,
			`{"reason":"r","additional_attempts":1}`,
			`{"expected_revision":"3","reason":"","additional_attempts":1}`,
			`{"expected_revision":"3","reason":"` + strings.Repeat("é", 1025) + `","additional_attempts":1}`,
			`{"expected_revision":"03","reason":"r","additional_attempts":1}`,
			`{"expected_revision":"+3","reason":"r","additional_attempts":1}`,
			`{"expected_revision":"3.0","reason":"r","additional_attempts":1}`,
			`{"expected_revision":3,"reason":"r","additional_attempts":1}`,
			`{"expected_revision":"3","reason":"r","additional_attempts":1,"state":"PENDING"}`,
			`{"expected_revision":"3","Reason":"r","additional_attempts":1}`,
			`{"expected_revision":"3","reason":"r","reason":"r","additional_attempts":1}`,
		} {
			wantError(t, e.post(t, c, path2, newKey(), b), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.post(t, c, path2, "", `{"expected_revision":"3","reason":"r","additional_attempts":1}`), http.StatusBadRequest, "INVALID_ARGUMENT")
		wantError(t, e.post(t, c, path2+"?x=1", newKey(), `{"expected_revision":"3","reason":"r","additional_attempts":1}`), http.StatusBadRequest, "INVALID_ARGUMENT")
	})
	t.Run("StaleRevision", func(t *testing.T) {
		for _, rev := range []string{"2", "4"} {
			wantError(t, e.post(t, c, path2, newKey(), `{"expected_revision":"`+rev+`","reason":"r","additional_attempts":1}`), http.StatusConflict, "STATE_CONFLICT")
		}
	})
	t.Run("BudgetLimit", func(t *testing.T) {
		if _, err := e.srv.DB.Exec(`UPDATE event_deliveries SET attempt_budget = 999999 WHERE id = ?`, d2.ID); err != nil {
			t.Fatal(err)
		}
		r := e.post(t, c, path2, newKey(), `{"expected_revision":"3","reason":"r","additional_attempts":2}`)
		wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
		doctest.Check(t, docPath, "subscriptions-retry-budget-response", r.Body)
		r = e.post(t, c, path2, newKey(), `{"expected_revision":"3","reason":"r","additional_attempts":1}`)
		wantStatus(t, r, http.StatusOK)
		var rc struct {
			Delivery subscriptions.DeliveryView `json:"delivery"`
		}
		json.Unmarshal(r.Data, &rc)
		if rc.Delivery.AttemptBudget != subscriptions.MaxAttemptBudget || rc.Delivery.State != "PENDING" {
			t.Errorf("%+v; want PENDING with budget 1000000", rc.Delivery)
		}
	})
}

func TestS22_QueriesNeverChangeState(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "query")
	s := e.create(t, c, createBody(c.QueueID, "queried", ""))
	e.cancelled(t, c)
	e.waitPending(t, c, s.ID, 1)
	_, l := e.claimOne(t, c, s.ID)
	e.expireLease(t, l.Delivery.ID)
	d := "/v1/subscriptions/" + s.ID + "/deliveries"

	t.Run("Reads", func(t *testing.T) {
		for range 3 {
			for _, p := range []string{d + "/" + l.Delivery.ID, d, d + "?state=LEASED", "/v1/subscriptions/" + s.ID, "/v1/subscriptions?queue_id=" + c.QueueID} {
				wantStatus(t, e.get(t, c, p), http.StatusOK)
			}
		}
		got := e.delivery(t, c, s.ID, l.Delivery.ID)
		if got.State != "LEASED" || got.Revision != 2 || got.LeaseUntil == "" {
			t.Errorf("after reads: %+v; want LEASED at revision 2 with its past lease_until", got)
		}
	})
	t.Run("PausedClaimDoesNotRecover", func(t *testing.T) {
		e.configure(t, c, s.ID, false)
		if leases := e.claim(t, e.session(t, c, s.ID, 1)); len(leases) != 0 {
			t.Fatalf("claimed %d while paused", len(leases))
		}
		if got := e.delivery(t, c, s.ID, l.Delivery.ID); got.State != "LEASED" || got.Revision != 2 {
			t.Errorf("paused: %+v; want still LEASED at revision 2", got)
		}
	})
	t.Run("ClaimRecovers", func(t *testing.T) {
		e.configure(t, c, s.ID, true)
		_, again := e.claimOne(t, c, s.ID)
		if again.Delivery.ID != l.Delivery.ID || again.Delivery.Revision != 4 || again.Delivery.LeaseEpoch != 2 || again.Delivery.Attempts != 2 {
			t.Errorf("reclaimed: %+v; want the same delivery at revision 4 (recovered, leased), epoch 2, attempts 2", again.Delivery)
		}
	})
}

// recoveryStates lets the first delivery of a two-attempt subscription's
// lease run out twice and returns the delivery after each recovery: back
// to PENDING after the first lease, EXPIRED after the second. A claim
// recovers, or the background sweeper when bySweeper is set.
func recoveryStates(t *testing.T, e *env, bySweeper bool) []subscriptions.DeliveryView {
	t.Helper()
	c := e.cred(t, "ns", "recovery")
	s := e.create(t, c, createBody(c.QueueID, "recovered", `,"max_attempts":2`))
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, s.ID, 2)
	a, l := e.claimOne(t, c, s.ID)
	first := l.Delivery.ID
	// holder keeps the second delivery leased throughout: its claims
	// recover the subscription's expired leases and lease nothing.
	holder, h := e.claimOne(t, c, s.ID)
	if h.Delivery.ID == first {
		t.Fatal("the holder leased the first delivery again")
	}
	var out []subscriptions.DeliveryView
	for i := range 2 {
		e.expireLease(t, first)
		if bySweeper {
			deadline := time.Now().Add(waitBound)
			for e.delivery(t, c, s.ID, first).State == subscriptions.StateLeased {
				if time.Now().After(deadline) {
					t.Fatalf("the sweeper did not recover the lease within %v", waitBound)
				}
				select {
				case <-e.mod.Claimable():
				case <-time.After(10 * time.Millisecond):
				}
			}
		} else if l := e.claim(t, holder); len(l) != 0 {
			t.Fatalf("the full holder leased %d deliveries", len(l))
		}
		out = append(out, e.delivery(t, c, s.ID, first))
		if i == 0 {
			if l := e.claimNext(t, a); l.Delivery.ID != first {
				t.Fatal("the recovered delivery was not leased again")
			}
		}
	}
	return out
}

func TestS22_SweeperRecoversLikeAClaim(t *testing.T) {
	t.Parallel()
	byClaim := recoveryStates(t, start(t), false)
	bySweeper := recoveryStates(t, start(t, func(cfg *subscriptions.Config) { cfg.RecoverInterval = 20 * time.Millisecond }), true)
	want := []struct {
		state            string
		revision, epoch  uint64
		attempts, budget int
	}{
		{"PENDING", 3, 1, 1, 2},
		{"EXPIRED", 5, 2, 2, 2},
	}
	for i, w := range want {
		for path, d := range map[string]subscriptions.DeliveryView{"claim": byClaim[i], "sweeper": bySweeper[i]} {
			if d.State != w.state || uint64(d.Revision) != w.revision || uint64(d.LeaseEpoch) != w.epoch ||
				d.Attempts != w.attempts || d.AttemptBudget != w.budget || d.LeaseUntil != "" || d.AcknowledgedAt != "" {
				t.Errorf("recovery %d by %s: %+v; want %+v without lease_until", i+1, path, d, w)
			}
		}
	}
}

func TestS22_SweeperRecoversPausedSubscriptionsToo(t *testing.T) {
	t.Parallel()
	e := start(t, func(cfg *subscriptions.Config) { cfg.RecoverInterval = 20 * time.Millisecond })
	c := e.cred(t, "ns", "paused-sweep")
	s := e.create(t, c, createBody(c.QueueID, "paused", ""))
	e.cancelled(t, c)
	e.waitPending(t, c, s.ID, 1)
	session, l := e.claimOne(t, c, s.ID)
	e.configure(t, c, s.ID, false)
	e.expireLease(t, l.Delivery.ID)
	deadline := time.Now().Add(waitBound)
	for e.delivery(t, c, s.ID, l.Delivery.ID).State == subscriptions.StateLeased {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper did not recover the lease within %v", waitBound)
		}
		select {
		case <-e.mod.Claimable():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if d := e.delivery(t, c, s.ID, l.Delivery.ID); d.State != subscriptions.StatePending || d.Revision != 3 || d.LeaseEpoch != 1 {
		t.Fatalf("recovered while paused: %+v; want PENDING at revision 3, epoch 1", d)
	}
	// Nothing new is leased while paused, and the latest proof still ACKs.
	if leases := e.claim(t, e.session(t, c, s.ID, 1)); len(leases) != 0 {
		t.Fatalf("claimed %d while paused", len(leases))
	}
	if res := e.ack(t, s.ID, session, l); res.Deduplicated {
		t.Fatal("late ACK deduplicated")
	}
	if d := e.delivery(t, c, s.ID, l.Delivery.ID); d.State != subscriptions.StateAcked {
		t.Fatalf("after the late ACK: %s, want ACKED", d.State)
	}
}
