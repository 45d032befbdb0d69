package subscriptions_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/subscriptions"
)

func TestS12_GetReturnsTheCurrentSubscription(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "get")
	created := e.create(t, c, createBody(c.QueueID, "current", ""))
	e.configure(t, c, created.ID, false)
	e.cancelled(t, c)

	t.Run("Current", func(t *testing.T) {
		s := e.subscription(t, c, created.ID)
		if s.Revision != 2 || s.Enabled || s.ID != created.ID || s.CreatedAt != created.CreatedAt || s.UpdatedAt == created.UpdatedAt {
			t.Errorf("GET: %+v; want revision 2, paused, a later updated_at", s)
		}
	})
	t.Run("BadID", func(t *testing.T) {
		for _, id := range []string{strings.ToUpper(created.ID), created.ID[:31], created.ID + "0", "x"} {
			wantError(t, e.get(t, c, "/v1/subscriptions/"+id), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.get(t, c, "/v1/subscriptions/0123456789abcdef0123456789abcdef"), http.StatusNotFound, "NOT_FOUND")
	})
}

func TestS13_ListSubscriptions(t *testing.T) {
	t.Parallel()
	e := start(t)
	listed := e.cred(t, "ns", "listed")
	other := e.cred(t, "ns", "other")
	// a holds grants on both queues.
	a := e.credOn(t, listed, other.QueueID)
	b := e.cred(t, "ns", "listed")
	var mine []subscriptions.SubscriptionView
	for i := range 5 {
		mine = append(mine, e.create(t, a, createBody(listed.QueueID, fmt.Sprintf("results-%d", i+1), "")))
	}
	e.create(t, b, createBody(listed.QueueID, "not-mine", ""))
	e.create(t, a, createBody(other.QueueID, "other-queue", ""))
	slices.Reverse(mine)
	list := "/v1/subscriptions?queue_id=" + listed.QueueID

	t.Run("OwnOnThisQueueNewestFirst", func(t *testing.T) {
		p := decodeSubscriptionPage(t, e.get(t, a, list))
		if got := subscriptionIDs(p.Items); !slices.Equal(got, subscriptionIDs(mine)) || p.NextCursor != "" {
			t.Fatalf("list %v (next_cursor %q), want %v", got, p.NextCursor, subscriptionIDs(mine))
		}
		if !newestFirst(t, func(i int) string { return p.Items[i].CreatedAt }, func(i int) string { return p.Items[i].ID }, len(p.Items)) {
			t.Errorf("not ordered by created_at, id descending: %+v", p.Items)
		}
	})
	t.Run("Pages", func(t *testing.T) {
		first := e.get(t, a, list+"&limit=2")
		cursor := decodeSubscriptionPage(t, first).NextCursor
		if cursor == "" {
			t.Fatal("the first of three pages has no next_cursor")
		}
		doctest.Check(t, docPath, "subscriptions-list-response", cursorPlaceholder(first.Body, cursor))
		var got []subscriptions.SubscriptionView
		var sizes []int
		for _, p := range walk(t, e, a, list+"&limit=2") {
			got = append(got, p.Items...)
			sizes = append(sizes, len(p.Items))
		}
		if !slices.Equal(subscriptionIDs(got), subscriptionIDs(mine)) || !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Fatalf("pages %v hold %v, want 2, 2, 1 holding %v", sizes, subscriptionIDs(got), subscriptionIDs(mine))
		}
		if p := decodeSubscriptionPage(t, e.get(t, a, list+"&limit=5")); len(p.Items) != 5 || p.NextCursor != "" {
			t.Errorf("limit=5 over 5: %d items, next_cursor %q", len(p.Items), p.NextCursor)
		}
	})
	t.Run("CursorIsBound", func(t *testing.T) {
		cursor := decodeSubscriptionPage(t, e.get(t, a, list+"&limit=2")).NextCursor
		// Another queue of the same credential.
		wantError(t, e.get(t, a, "/v1/subscriptions?queue_id="+other.QueueID+"&cursor="+cursor), http.StatusBadRequest, "INVALID_ARGUMENT")
		// Another credential on the same queue.
		wantError(t, e.get(t, b, list+"&cursor="+cursor), http.StatusBadRequest, "INVALID_ARGUMENT")
		// Malformed cursors.
		for _, bad := range []string{"x", cursor[:len(cursor)-1], cursor + "A", strings.Repeat("A", len(cursor))} {
			wantError(t, e.get(t, a, list+"&cursor="+bad), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		// The same list with another limit is fine.
		if p := decodeSubscriptionPage(t, e.get(t, a, list+"&limit=10&cursor="+cursor)); len(p.Items) != 3 {
			t.Errorf("the rest after the first two: %d items, want 3", len(p.Items))
		}
	})
	t.Run("Parameters", func(t *testing.T) {
		for _, path := range []string{
			"/v1/subscriptions", list + "&limit=0", list + "&limit=101", list + "&limit=01", list + "&limit=x", list + "&limit=-1",
			"/v1/subscriptions?queue_id=" + strings.ToUpper(listed.QueueID),
		} {
			wantError(t, e.get(t, a, path), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.get(t, a, "/v1/subscriptions?queue_id=0123456789abcdef0123456789abcdef"), http.StatusNotFound, "NOT_FOUND")
		if p := decodeSubscriptionPage(t, e.get(t, a, list+"&limit=100")); len(p.Items) != 5 {
			t.Errorf("limit=100: %d items", len(p.Items))
		}
	})
	t.Run("DefaultLimit", func(t *testing.T) {
		c := e.cred(t, "ns", "many")
		for range 21 {
			e.create(t, c, createBody(c.QueueID, "m"+rand8(), ""))
		}
		p := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID))
		if len(p.Items) != 20 || p.NextCursor == "" {
			t.Fatalf("without limit: %d items, next_cursor %q; want 20 and a cursor", len(p.Items), p.NextCursor)
		}
		rest := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID+"&cursor="+p.NextCursor))
		if len(rest.Items) != 1 || rest.NextCursor != "" {
			t.Fatalf("second page: %d items, next_cursor %q; want 1 and none", len(rest.Items), rest.NextCursor)
		}
	})
}

// walk follows next_cursor from path to the end and returns the pages.
func walk(t *testing.T, e *env, c servertest.Credential, path string) []subscriptionPage {
	t.Helper()
	var pages []subscriptionPage
	cursor := ""
	for {
		p := path
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		pg := decodeSubscriptionPage(t, e.get(t, c, p))
		pages = append(pages, pg)
		if pg.NextCursor == "" {
			return pages
		}
		if len(pages) > 100 {
			t.Fatal("more than 100 pages")
		}
		cursor = pg.NextCursor
	}
}

func subscriptionIDs(ss []subscriptions.SubscriptionView) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func TestS14_ConfigureChangesEnabled(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "configure")
	s := e.create(t, c, createBody(c.QueueID, "configured", ""))
	path := "/v1/subscriptions/" + s.ID + ":configure"

	t.Run("Pause", func(t *testing.T) {
		body := `{
  "expected_revision": "1",
  "enabled": false,
  "reason": "receiver maintenance"
}`
		r := e.post(t, c, path, newKey(), body)
		wantStatus(t, r, http.StatusOK)
		doctest.Check(t, docPath, "subscriptions-configure-request", []byte(body))
		doctest.Check(t, docPath, "subscriptions-configure-response", r.Body)
		rc := decodeReceipt(t, r)
		if rc.Deduplicated || rc.Subscription.Revision != 2 || rc.Subscription.Enabled {
			t.Fatalf("receipt %+v; want revision 2, paused, not deduplicated", rc)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		for _, body := range []string{
			`{"enabled":true,"reason":"r"}`,
			`{"expected_revision":"2","reason":"r"}`,
			`{"expected_revision":"2","enabled":true}`,
			`{"expected_revision":null,"enabled":true,"reason":"r"}`,
			`{"expected_revision":"2","enabled":null,"reason":"r"}`,
			`{"expected_revision":"2","enabled":true,"reason":null}`,
			`{"expected_revision":"2","enabled":true,"reason":""}`,
			`{"expected_revision":"2","enabled":true,"reason":"` + strings.Repeat("界", 1025) + `"}`,
			`{"expected_revision":2,"enabled":true,"reason":"r"}`,
			`{"expected_revision":"+2","enabled":true,"reason":"r"}`,
			`{"expected_revision":"02","enabled":true,"reason":"r"}`,
			`{"expected_revision":"2.0","enabled":true,"reason":"r"}`,
			`{"expected_revision":"2","enabled":"true","reason":"r"}`,
			`{"expected_revision":"2","enabled":true,"reason":"r","note":"x"}`,
			`{"Expected_revision":"2","enabled":true,"reason":"r"}`,
			`{"expected_revision":"2","enabled":true,"enabled":true,"reason":"r"}`,
			`{"expected_revision":"2","enabled":true,"reason":"r"} []`,
			``,
		} {
			wantError(t, e.post(t, c, path, newKey(), body), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.post(t, c, path, "", configureBody(2, true, "r")), http.StatusBadRequest, "INVALID_ARGUMENT")
		wantError(t, e.post(t, c, "/v1/subscriptions/0123456789abcdef0123456789abcdef:configure", newKey(), configureBody(2, true, "r")), http.StatusNotFound, "NOT_FOUND")
		wantError(t, e.post(t, c, "/v1/subscriptions/XYZ:configure", newKey(), configureBody(2, true, "r")), http.StatusBadRequest, "INVALID_ARGUMENT")
	})
	t.Run("StaleRevision", func(t *testing.T) {
		for _, rev := range []uint64{1, 3, 0} {
			r := e.post(t, c, path, newKey(), configureBody(rev, true, "resume"))
			wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
			if rev == 1 {
				doctest.Check(t, docPath, "subscriptions-stale-revision-response", r.Body)
			}
		}
	})
	t.Run("LongestReason", func(t *testing.T) {
		reason := strings.Repeat("界", 1024)
		r := e.post(t, c, path, newKey(), configureBody(2, true, reason))
		wantStatus(t, r, http.StatusOK)
		var stored string
		if err := e.srv.DB.QueryRow(`SELECT reason FROM subscription_changes WHERE subscription_id = ? AND revision = 3`, s.ID).Scan(&stored); err != nil || stored != reason {
			t.Fatalf("audited reason of %d characters (%v), want the 1024 sent", len([]rune(stored)), err)
		}
	})
	t.Run("RefusedChangedNothing", func(t *testing.T) {
		if got := e.subscription(t, c, s.ID); got.Revision != 3 || !got.Enabled {
			t.Fatalf("%+v; want revision 3, enabled", got)
		}
		var n int
		e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscription_changes WHERE subscription_id = ?`, s.ID).Scan(&n)
		if n != 2 {
			t.Fatalf("%d audited changes, want 2", n)
		}
	})
}

func TestS15_EveryConfigureIsANewAuditedChange(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "audited")
	s := e.create(t, c, createBody(c.QueueID, "audited", ""))
	path := "/v1/subscriptions/" + s.ID + ":configure"
	firstKey, firstBody := newKey(), configureBody(1, true, "already enabled")
	first := e.post(t, c, path, firstKey, firstBody)
	wantStatus(t, first, http.StatusOK)
	steps := []bool{true, false, false, true}
	for i, enabled := range steps[1:] {
		r := e.post(t, c, path, newKey(), configureBody(uint64(i+2), enabled, "step"))
		wantStatus(t, r, http.StatusOK)
		if got := decodeReceipt(t, r).Subscription; uint64(got.Revision) != uint64(i+3) || got.Enabled != enabled {
			t.Fatalf("step %d: %+v", i+2, got)
		}
	}

	t.Run("SameValueBumpsTheRevision", func(t *testing.T) {
		if got := decodeReceipt(t, first).Subscription; got.Revision != 2 || !got.Enabled {
			t.Errorf("enabling an enabled subscription: %+v; want revision 2", got)
		}
	})
	t.Run("AuditRows", func(t *testing.T) {
		rows, err := e.srv.DB.Query(`SELECT revision, enabled, credential_id FROM subscription_changes WHERE subscription_id = ? ORDER BY revision`, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var revisions []uint64
		var enabled []bool
		for rows.Next() {
			var rev uint64
			var en bool
			var cred string
			if err := rows.Scan(&rev, &en, &cred); err != nil {
				t.Fatal(err)
			}
			if cred != c.CredentialID {
				t.Errorf("change %d by %s, want %s", rev, cred, c.CredentialID)
			}
			revisions, enabled = append(revisions, rev), append(enabled, en)
		}
		if !slices.Equal(revisions, []uint64{2, 3, 4, 5}) || !slices.Equal(enabled, steps) {
			t.Errorf("audited revisions %v enabled %v, want 2-5 with %v", revisions, enabled, steps)
		}
	})
	t.Run("ReplayIsTheOriginalReceipt", func(t *testing.T) {
		replay := e.post(t, c, path, firstKey, firstBody)
		wantReplay(t, first, replay)
		if got := decodeReceipt(t, replay).Subscription; got.Revision != 2 {
			t.Errorf("replay shows revision %d, want the original 2", got.Revision)
		}
		if got := e.subscription(t, c, s.ID); got.Revision != 5 {
			t.Errorf("GET shows revision %d, want 5", got.Revision)
		}
		var n int
		e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscription_changes WHERE subscription_id = ?`, s.ID).Scan(&n)
		if n != 4 {
			t.Errorf("%d audited changes after the replay, want 4", n)
		}
	})
	t.Run("SameKeyOtherContent", func(t *testing.T) {
		wantError(t, e.post(t, c, path, firstKey, configureBody(5, true, "already enabled")), http.StatusConflict, "IDEMPOTENCY_CONFLICT")
	})
	t.Run("KeyIsPerSubscription", func(t *testing.T) {
		other := e.create(t, c, createBody(c.QueueID, "other", ""))
		r := e.post(t, c, "/v1/subscriptions/"+other.ID+":configure", firstKey, firstBody)
		wantStatus(t, r, http.StatusOK)
		if decodeReceipt(t, r).Deduplicated {
			t.Error("a key used on another subscription was treated as a replay")
		}
	})
}

func TestS16_PausedSubscriptions(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "paused")
	control := e.create(t, c, createBody(c.QueueID, "control", ""))
	paused := e.create(t, c, createBody(c.QueueID, "paused", ""))
	e.cancelledN(t, c, 2)
	e.waitPending(t, c, paused.ID, 2)
	session, lease := e.claimOne(t, c, paused.ID)
	e.configure(t, c, paused.ID, false)
	e.cancelledN(t, c, 2)

	t.Run("NoNewMaterialisation", func(t *testing.T) {
		// The control subscription on the same queue has been scanned past
		// both new events, so the materialiser has had its chance.
		e.waitCursor(t, c, control.ID, 4)
		n, _, err := subscriptions.DeliveryMaterialize(context.Background(), e.srv.DB, e.tasks, paused.ID, 100)
		if err != nil || n != 0 {
			t.Fatalf("materialise while paused: %d %v", n, err)
		}
		s := e.subscription(t, c, paused.ID)
		if s.CursorSequence != 2 || s.PendingCount != 2 {
			t.Errorf("paused: %+v; want cursor 2, pending 2", s)
		}
		if got := sequences(e.deliveries(t, c, paused.ID)); !slices.Equal(got, []uint64{1, 2}) {
			t.Errorf("paused subscription has deliveries %v, want 1 and 2", got)
		}
	})
	t.Run("NoNewClaims", func(t *testing.T) {
		if leases := e.claim(t, e.session(t, c, paused.ID, 4)); len(leases) != 0 {
			t.Fatalf("claimed %d deliveries of a paused subscription", len(leases))
		}
		ds := e.deliveries(t, c, paused.ID)
		states := map[string]int{}
		for _, d := range ds {
			states[d.State]++
		}
		if states[subscriptions.StatePending] != 1 || states[subscriptions.StateLeased] != 1 {
			t.Errorf("states %v, want one PENDING and the one LEASED before the pause", states)
		}
	})
	t.Run("ExistingLeasesStillAck", func(t *testing.T) {
		res := e.ack(t, paused.ID, session, lease)
		if res.Deduplicated {
			t.Fatal("first ACK deduplicated")
		}
		if d := e.delivery(t, c, paused.ID, lease.Delivery.ID); d.State != subscriptions.StateAcked {
			t.Errorf("delivery %s after ACK, want ACKED", d.State)
		}
		if s := e.subscription(t, c, paused.ID); s.PendingCount != 1 || s.Revision != 2 || s.Enabled {
			t.Errorf("%+v; want pending 1, revision 2, still paused", s)
		}
	})
	t.Run("ResumeCatchesUp", func(t *testing.T) {
		e.configure(t, c, paused.ID, true)
		s := e.waitCursor(t, c, paused.ID, 4)
		if s.PendingCount != 3 {
			t.Errorf("after resuming: %+v; want pending 3", s)
		}
		if leases := e.claim(t, e.session(t, c, paused.ID, 4)); len(leases) != 3 {
			t.Errorf("claimed %d after resuming, want 3", len(leases))
		}
	})
}
