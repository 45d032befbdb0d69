package subscriptions_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

func TestS4_CreateFields(t *testing.T) {
	t.Parallel()
	e := start(t)
	t.Run("Fields", func(t *testing.T) { createFields(t, e) })
	t.Run("RefusedCreatesStoreNothing", func(t *testing.T) {
		var n int
		if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscriptions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		// 3 defaults, 2 bounds, 5 names, 3 unique, 1 canonical.
		if n != 14 {
			t.Errorf("%d subscriptions stored, want the 14 created successfully", n)
		}
	})
}

// createFields checks the create body's fields in parallel subtests.
func createFields(t *testing.T, e *env) {
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "defaults", "q")
		for _, extra := range []string{"", `,"types":[],"max_pending":0,"max_attempts":0`, `,"types":null,"from_sequence":null`} {
			s := e.create(t, c, createBody(c.QueueID, "d"+rand8(), extra))
			if !slices.Equal(s.Types, allTypes) || s.MaxPending != 100 || s.MaxAttempts != 20 || !s.Enabled || s.Revision != 1 || s.PendingCount != 0 {
				t.Errorf("%s: got %+v; want all four types, max_pending 100, max_attempts 20, enabled, revision 1", extra, s)
			}
		}
	})
	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "bounds", "q")
		for _, tc := range []struct {
			extra                   string
			maxPending, maxAttempts int
		}{
			{`,"max_pending":1,"max_attempts":1`, 1, 1},
			{`,"max_pending":1000,"max_attempts":100`, 1000, 100},
		} {
			s := e.create(t, c, createBody(c.QueueID, "b"+rand8(), tc.extra))
			if s.MaxPending != tc.maxPending || s.MaxAttempts != tc.maxAttempts {
				t.Errorf("%s: max_pending %d, max_attempts %d", tc.extra, s.MaxPending, s.MaxAttempts)
			}
		}
		for _, extra := range []string{
			`,"max_pending":1001`, `,"max_pending":-1`, `,"max_pending":"5"`, `,"max_pending":2.5`,
			`,"max_attempts":101`, `,"max_attempts":-1`, `,"max_attempts":"5"`, `,"max_attempts":1e1`,
		} {
			wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "b"+rand8(), extra)), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("Name", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "names", "q")
		for _, name := range []string{"a", "0", "A.b_c-d", "object-results", strings.Repeat("n", 128)} {
			if s := e.create(t, c, createBody(c.QueueID, name, "")); s.Name != name {
				t.Errorf("name %q came back as %q", name, s.Name)
			}
		}
		for _, name := range []string{"", strings.Repeat("n", 129), "-a", ".a", "_a", "a b", "é", "a/b", "a:b", "a\\u0000"} {
			wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, name, "")), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("UniqueInTheNamespace", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "unique", "q")
		e.create(t, c, createBody(c.QueueID, "taken", ""))
		key := newKey()
		r := e.post(t, c, "/v1/subscriptions", key, createBody(c.QueueID, "taken", `,"types":["task.failed"]`))
		wantError(t, r, http.StatusConflict, "STATE_CONFLICT")
		doctest.Check(t, docPath, "subscriptions-name-taken-response", r.Body)
		// The refused request stored nothing under its key.
		wantStatus(t, e.post(t, c, "/v1/subscriptions", key, createBody(c.QueueID, "free", `,"types":["task.failed"]`)), http.StatusCreated)
		// Another credential of the namespace, on another queue.
		other := e.cred(t, "unique", "q2")
		wantError(t, e.post(t, other, "/v1/subscriptions", newKey(), createBody(other.QueueID, "taken", "")), http.StatusConflict, "STATE_CONFLICT")
		// The same name in another namespace is another subscription.
		elsewhere := e.cred(t, "unique-elsewhere", "q")
		e.create(t, elsewhere, createBody(elsewhere.QueueID, "taken", ""))
	})
	t.Run("Required", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "required", "q")
		q := c.QueueID
		for _, body := range []string{
			`{"queue_id":"` + q + `"}`, `{"name":"n"}`, `{"name":null,"queue_id":"` + q + `"}`,
			`{"name":"n","queue_id":null}`, createBody(strings.ToUpper(q), "n", ""), createBody(q[:31], "n", ""),
			`{}`, `[]`, ``,
		} {
			wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), body), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), createBody("0123456789abcdef0123456789abcdef", "n", "")), http.StatusNotFound, "NOT_FOUND")
		wantError(t, e.post(t, c, "/v1/subscriptions", "", createBody(q, "n", "")), http.StatusBadRequest, "INVALID_ARGUMENT")
	})
	t.Run("StrictJSON", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "strict", "q")
		q := c.QueueID
		for _, body := range []string{
			createBody(q, "n", `,"priority":1`),
			`{"Name":"n","queue_id":"` + q + `"}`,
			`{"name":"n","Queue_ID":"` + q + `"}`,
			createBody(q, "n", `,"name":"m"`),
			createBody(q, "n", `,"types":["task.failed"],"types":["task.failed"]`),
			createBody(q, "n", "") + ` {}`,
			createBody(q, "n", `,"types":"task.failed"`),
			createBody(q, "n", `,"enabled":false`),
		} {
			wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), body), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})
	t.Run("CanonicalFromSequence", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "canonical", "q")
		e.cancelledN(t, c, 1)
		for _, from := range []string{`"+1"`, `"01"`, `"1.0"`, `"1e0"`, `" 1"`, `"-1"`, `""`, `1`, `0`, `true`, `"18446744073709551616"`} {
			wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "n", `,"from_sequence":`+from)), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		if s := e.create(t, c, createBody(c.QueueID, "n", `,"from_sequence":"1"`)); s.CursorSequence != 1 {
			t.Errorf("from_sequence \"1\": cursor %d", s.CursorSequence)
		}
	})
}

// rand8 returns 8 random characters for a name.
func rand8() string { return strings.ToLower(newKey()[4:12]) }

func TestS5_TypesAreASubsetOfTheFourResults(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "types")
	for _, types := range []string{
		`["task.requeued"]`, `["task.succeeded","task.requeued"]`, `["task.failed","task.failed"]`,
		`["task.started"]`, `["TASK.FAILED"]`, `["Task.Failed"]`, `[""]`, `[1]`, `[null]`,
	} {
		r := e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "typed", `,"types":`+types))
		wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
		if types == `["task.requeued"]` {
			doctest.Check(t, docPath, "subscriptions-requeued-type-response", r.Body)
		}
	}
	t.Run("RequeuedIsNeverDelivered", func(t *testing.T) {
		s := e.create(t, c, createBody(c.QueueID, "all", ""))
		e.requeued(t, c) // task.requeued, then task.cancelled
		e.waitCursor(t, c, s.ID, 2)
		ds := e.deliveries(t, c, s.ID)
		evs := e.events(t, c.QueueID)
		if len(evs) != 2 || evs[0].Type != tasks.EventRequeued || evs[1].Type != tasks.EventCancelled {
			t.Fatalf("log: %+v", evs)
		}
		if len(ds) != 1 || ds[0].EventID != evs[1].ID {
			t.Fatalf("deliveries %+v, want only the task.cancelled event", ds)
		}
	})
}

func TestS4a_FromSequenceIsTheInitialCursor(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "cursor")
	e.cancelledN(t, c, 3)
	omitted := e.create(t, c, createBody(c.QueueID, "omitted", ""))
	null := e.create(t, c, createBody(c.QueueID, "null", `,"from_sequence":null`))
	zero := e.create(t, c, createBody(c.QueueID, "zero", `,"from_sequence":"0"`))
	two := e.create(t, c, createBody(c.QueueID, "two", `,"from_sequence":"2"`))
	atHead := e.create(t, c, createBody(c.QueueID, "head", `,"from_sequence":"3"`))
	for _, tc := range []struct {
		s    subscriptions.SubscriptionView
		want uint64
	}{{omitted, 3}, {null, 3}, {zero, 0}, {two, 2}, {atHead, 3}} {
		if uint64(tc.s.CursorSequence) != tc.want {
			t.Errorf("%s: cursor_sequence %d at creation, want %d", tc.s.Name, tc.s.CursorSequence, tc.want)
		}
	}
	e.cancelled(t, c) // sequence 4
	for _, tc := range []struct {
		s    subscriptions.SubscriptionView
		want []uint64
	}{
		{omitted, []uint64{4}}, {null, []uint64{4}}, {zero, []uint64{1, 2, 3, 4}}, {two, []uint64{3, 4}}, {atHead, []uint64{4}},
	} {
		t.Run(tc.s.Name, func(t *testing.T) {
			e.waitCursor(t, c, tc.s.ID, 4)
			if got := sequences(e.deliveries(t, c, tc.s.ID)); !slices.Equal(got, tc.want) {
				t.Errorf("delivered sequences %v, want %v", got, tc.want)
			}
		})
	}
}

func TestS6_CreateReplayReturnsTheOriginalSnapshot(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "replay")
	e.cancelled(t, c)
	key := newKey()
	body := createBody(c.QueueID, "replayed", `,"types":["task.failed","task.cancelled"],"max_pending":10`)
	first := e.post(t, c, "/v1/subscriptions", key, body)
	wantStatus(t, first, http.StatusCreated)
	created := decodeReceipt(t, first)
	if created.Deduplicated {
		t.Fatal("first create is deduplicated")
	}
	// Later changes: a result is materialised, the subscription is paused.
	e.cancelled(t, c)
	e.waitCursor(t, c, created.Subscription.ID, 2)
	e.configure(t, c, created.Subscription.ID, false)

	t.Run("SameKeySameContent", func(t *testing.T) {
		reordered := "{\n  \"max_pending\": 10,\n  \"types\": [\"task.failed\", \"task.cancelled\"],\n  \"queue_id\": \"" + c.QueueID + "\",\n  \"name\": \"replayed\"\n}"
		replay := e.post(t, c, "/v1/subscriptions", key, reordered)
		wantReplay(t, first, replay)
		doctest.Check(t, docPath, "subscriptions-create-replay-response", replay.Body)
		got := decodeReceipt(t, replay).Subscription
		if got.Revision != 1 || !got.Enabled || got.CursorSequence != 1 || got.PendingCount != 0 {
			t.Errorf("replay shows %+v; want the original revision 1, enabled, cursor 1, pending 0", got)
		}
		now := e.subscription(t, c, got.ID)
		if now.Revision != 2 || now.Enabled || now.CursorSequence != 2 || now.PendingCount != 1 {
			t.Errorf("GET shows %+v; want the current revision 2, paused, cursor 2, pending 1", now)
		}
	})
	t.Run("SameKeyOtherContent", func(t *testing.T) {
		for _, other := range []string{
			createBody(c.QueueID, "replayed", `,"types":["task.failed","task.cancelled"],"max_pending":11`),
			createBody(c.QueueID, "replayed", `,"types":["task.failed","task.cancelled"],"max_pending":10,"from_sequence":"1"`),
		} {
			r := e.post(t, c, "/v1/subscriptions", key, other)
			wantError(t, r, http.StatusConflict, "IDEMPOTENCY_CONFLICT")
			doctest.Check(t, docPath, "subscriptions-idempotency-conflict-response", r.Body)
		}
	})
	t.Run("NewKeySameContent", func(t *testing.T) {
		// A new key is a new create, and the name is taken.
		wantError(t, e.post(t, c, "/v1/subscriptions", newKey(), body), http.StatusConflict, "STATE_CONFLICT")
	})
	t.Run("KeyBelongsToTheCredential", func(t *testing.T) {
		other := e.cred(t, "ns2", "replay")
		r := e.post(t, other, "/v1/subscriptions", key, createBody(other.QueueID, "replayed", `,"types":["task.failed","task.cancelled"],"max_pending":10`))
		wantStatus(t, r, http.StatusCreated)
	})
	t.Run("OneSubscription", func(t *testing.T) {
		if p := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID)); len(p.Items) != 1 {
			t.Fatalf("%d subscriptions, want 1", len(p.Items))
		}
	})
}

func TestS7_TypesAreNormalised(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "normal")
	for _, tc := range []struct{ in, want string }{
		{`["task.succeeded","task.failed","task.cancelled","task.needs_review"]`, `["task.cancelled","task.failed","task.needs_review","task.succeeded"]`},
		{`["task.succeeded","task.cancelled"]`, `["task.cancelled","task.succeeded"]`},
		{`["task.needs_review"]`, `["task.needs_review"]`},
		{`[]`, `["task.cancelled","task.failed","task.needs_review","task.succeeded"]`},
	} {
		r := e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "n"+rand8(), `,"types":`+tc.in))
		wantStatus(t, r, http.StatusCreated)
		sub := members(t, members(t, r.Data)["subscription"])
		wantJSON(t, "types in the receipt", sub["types"], tc.want)
		var id string
		json.Unmarshal(sub["id"], &id)
		wantJSON(t, "types in GET", members(t, e.get(t, c, "/v1/subscriptions/"+id).Data)["types"], tc.want)
	}
}

func TestS8_SubscriptionObject(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "shape")
	// Twelve results before the subscription, as in the seed's example.
	e.cancelledN(t, c, 12)
	body := `{
  "name": "object-results",
  "queue_id": "` + c.QueueID + `",
  "types": ["task.succeeded", "task.failed", "task.cancelled", "task.needs_review"],
  "max_pending": 100,
  "max_attempts": 20
}`
	r := e.post(t, c, "/v1/subscriptions", newKey(), body)
	wantStatus(t, r, http.StatusCreated)
	doctest.Check(t, docPath, "subscriptions-create-request", []byte(body))
	doctest.Check(t, docPath, "subscriptions-create-response", r.Body)
	rc := wantMembers(t, "create receipt", r.Data, "subscription", "deduplicated")
	wantJSON(t, "deduplicated", rc["deduplicated"], `false`)
	var id string

	t.Run("Receipt", func(t *testing.T) {
		m := wantMembers(t, "subscription", rc["subscription"], subscriptionMembers...)
		json.Unmarshal(m["id"], &id)
		wantJSON(t, "queue_id", m["queue_id"], `"`+c.QueueID+`"`)
		wantJSON(t, "credential_id", m["credential_id"], `"`+c.CredentialID+`"`)
		wantJSON(t, "name", m["name"], `"object-results"`)
		wantJSON(t, "enabled", m["enabled"], `true`)
		wantJSON(t, "types", m["types"], `["task.cancelled","task.failed","task.needs_review","task.succeeded"]`)
		wantJSON(t, "pending_count", m["pending_count"], `0`)
		wantJSON(t, "max_pending", m["max_pending"], `100`)
		wantJSON(t, "max_attempts", m["max_attempts"], `20`)
		if string(m["revision"]) != `"1"` || string(m["cursor_sequence"]) != `"12"` {
			t.Errorf("revision %s, cursor_sequence %s; want the decimal strings \"1\" and \"12\"", m["revision"], m["cursor_sequence"])
		}
		if !idPattern.Match(m["id"]) {
			t.Errorf("id = %s", m["id"])
		}
		if !timePattern.Match(m["created_at"]) || string(m["created_at"]) != string(m["updated_at"]) {
			t.Errorf("created_at %s, updated_at %s: want equal RFC 3339 UTC times", m["created_at"], m["updated_at"])
		}
	})
	t.Run("Get", func(t *testing.T) {
		e.cancelled(t, c) // sequence 13
		e.waitPending(t, c, id, 1)
		g := e.get(t, c, "/v1/subscriptions/"+id)
		wantStatus(t, g, http.StatusOK)
		doctest.Check(t, docPath, "subscriptions-get-response", g.Body)
		m := wantMembers(t, "subscription", g.Data, subscriptionMembers...)
		if string(m["cursor_sequence"]) != `"13"` || string(m["pending_count"]) != `1` || string(m["revision"]) != `"1"` {
			t.Errorf("GET: %s", g.Data)
		}
	})
	t.Run("ListItem", func(t *testing.T) {
		p := decodeSubscriptionPage(t, e.get(t, c, "/v1/subscriptions?queue_id="+c.QueueID))
		raw, _ := json.Marshal(p.Items[0])
		wantMembers(t, "listed subscription", raw, subscriptionMembers...)
	})
	t.Run("ConfigureReceipt", func(t *testing.T) {
		cr := e.post(t, c, "/v1/subscriptions/"+id+":configure", newKey(), configureBody(1, false, "shape"))
		wantStatus(t, cr, http.StatusOK)
		m := wantMembers(t, "configure receipt", cr.Data, "subscription", "deduplicated")
		wantMembers(t, "configured subscription", m["subscription"], subscriptionMembers...)
	})
}

func TestS9_CursorBacklogAndRevisionAreIndependent(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "usage")
	all := e.create(t, c, createBody(c.QueueID, "all", `,"max_attempts":1`))
	succeeded := e.create(t, c, createBody(c.QueueID, "succeeded-only", `,"types":["task.succeeded"]`))
	e.cancelledN(t, c, 3)

	t.Run("MaterialisationMovesTheCursorNotTheRevision", func(t *testing.T) {
		s := e.waitCursor(t, c, all.ID, 3)
		if s.PendingCount != 3 || s.Revision != 1 || s.UpdatedAt != all.UpdatedAt {
			t.Errorf("after materialisation: %+v; want pending 3, revision 1, updated_at unchanged", s)
		}
		// Events of other types move the cursor and nothing else.
		o := e.waitCursor(t, c, succeeded.ID, 3)
		if o.PendingCount != 0 || o.Revision != 1 {
			t.Errorf("succeeded-only: %+v; want pending 0, revision 1", o)
		}
	})
	session := e.session(t, c, all.ID, 2)
	leases := e.claim(t, session)
	if len(leases) != 2 {
		t.Fatalf("claimed %d, want 2", len(leases))
	}
	t.Run("AckLeavesTheBacklogNotTheRevision", func(t *testing.T) {
		e.ack(t, all.ID, session, leases[0])
		s := e.subscription(t, c, all.ID)
		if s.PendingCount != 2 || s.Revision != 1 || s.CursorSequence != 3 {
			t.Errorf("after an ACK: %+v; want pending 2, revision 1, cursor 3", s)
		}
	})
	t.Run("ExpiredStaysInTheBacklog", func(t *testing.T) {
		e.expireLease(t, leases[1].Delivery.ID)
		e.recoverLeases(t, all.ID)
		if d := e.delivery(t, c, all.ID, leases[1].Delivery.ID); d.State != subscriptions.StateExpired {
			t.Fatalf("delivery is %s, want EXPIRED", d.State)
		}
		if s := e.subscription(t, c, all.ID); s.PendingCount != 2 || s.Revision != 1 {
			t.Errorf("with one EXPIRED, one PENDING and one ACKED: %+v; want pending 2, revision 1", s)
		}
	})
	t.Run("ConfigureMovesOnlyTheRevision", func(t *testing.T) {
		s := e.configure(t, c, all.ID, false)
		if s.Revision != 2 || s.CursorSequence != 3 || s.PendingCount != 2 {
			t.Errorf("after configure: %+v; want revision 2, cursor 3, pending 2", s)
		}
	})
}

func TestS10_AtMost64SubscriptionsPerNamespace(t *testing.T) {
	t.Parallel()
	e := start(t)
	one := e.cred(t, "limited", "q1")
	two := e.cred(t, "limited", "q2")
	var firstKey, firstBody string
	var firstReply *servertest.Response
	type owned struct {
		c servertest.Credential
		s subscriptions.SubscriptionView
	}
	var created []owned
	for i := range subscriptions.MaxSubscriptionsPerNamespace {
		c := one
		if i%3 == 2 {
			c = two
		}
		key, body := newKey(), createBody(c.QueueID, "s"+rand8(), "")
		r := e.post(t, c, "/v1/subscriptions", key, body)
		wantStatus(t, r, http.StatusCreated)
		if i == 0 {
			firstKey, firstBody, firstReply = key, body, r
		}
		created = append(created, owned{c, decodeReceipt(t, r).Subscription})
	}
	// Paused subscriptions count as well.
	for _, o := range created[:5] {
		e.configure(t, o.c, o.s.ID, false)
	}
	for _, c := range []servertest.Credential{one, two} {
		r := e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "one-too-many", ""))
		wantError(t, r, http.StatusConflict, "SUBSCRIPTION_LIMIT")
		doctest.Check(t, docPath, "subscriptions-limit-response", r.Body)
	}
	t.Run("ReplayStillAnswers", func(t *testing.T) {
		wantReplay(t, firstReply, e.post(t, one, "/v1/subscriptions", firstKey, firstBody))
	})
	t.Run("OtherNamespaces", func(t *testing.T) {
		c := e.cred(t, "unlimited", "q1")
		e.create(t, c, createBody(c.QueueID, "one-too-many", ""))
	})
	var n int
	if err := e.srv.DB.QueryRow(`SELECT COUNT(*) FROM subscriptions WHERE namespace_id = ?`, one.NamespaceID).Scan(&n); err != nil || n != 64 {
		t.Fatalf("%d subscriptions in the namespace (%v), want 64", n, err)
	}
}

func TestS11_FromSequenceWithinTheRetainedLog(t *testing.T) {
	t.Parallel()
	e := start(t)
	c := e.cred(t, "ns", "retained")
	e.cancelledN(t, c, 5)
	create := func(from string) *servertest.Response {
		return e.post(t, c, "/v1/subscriptions", newKey(), createBody(c.QueueID, "from-"+rand8(), `,"from_sequence":"`+from+`"`))
	}
	t.Run("AboveTheHead", func(t *testing.T) {
		for _, from := range []string{"6", "18446744073709551615"} {
			r := create(from)
			wantError(t, r, http.StatusBadRequest, "INVALID_ARGUMENT")
			if from == "6" {
				doctest.Check(t, docPath, "subscriptions-after-head-response", r.Body)
			}
		}
	})
	// A subscription scanning from the start, paused before it read
	// anything: its unread events are purged below.
	stale := createPaused(t, e, c, "stale")
	purge(t, e, c.QueueID, 3)

	t.Run("BelowTheRetentionMark", func(t *testing.T) {
		for _, from := range []string{"1", "2"} {
			r := create(from)
			wantError(t, r, http.StatusGone, "EVENT_HISTORY_EXPIRED")
			if from == "1" {
				doctest.Check(t, docPath, "subscriptions-history-expired-response", r.Body)
			}
		}
	})
	t.Run("ZeroIsTheOldestRetained", func(t *testing.T) {
		r := create("0")
		wantStatus(t, r, http.StatusCreated)
		s := decodeReceipt(t, r).Subscription
		if s.CursorSequence != 3 {
			t.Fatalf("from_sequence \"0\" after purging 1-3: cursor %d, want 3", s.CursorSequence)
		}
		e.waitCursor(t, c, s.ID, 5)
		if got := sequences(e.deliveries(t, c, s.ID)); !slices.Equal(got, []uint64{4, 5}) {
			t.Errorf("delivered %v, want 4 and 5", got)
		}
	})
	t.Run("AtTheRetentionMark", func(t *testing.T) {
		for from, want := range map[string]uint64{"3": 3, "5": 5} {
			r := create(from)
			wantStatus(t, r, http.StatusCreated)
			if s := decodeReceipt(t, r).Subscription; uint64(s.CursorSequence) != want {
				t.Errorf("from_sequence %s: cursor %d", from, s.CursorSequence)
			}
		}
		wantError(t, create("6"), http.StatusBadRequest, "INVALID_ARGUMENT")
	})
	t.Run("PurgedHistoryIsNeverSkipped", func(t *testing.T) {
		if r := e.post(t, c, "/v1/subscriptions/"+stale.ID+":configure", newKey(), configureBody(1, true, "resume")); r.Status != http.StatusOK {
			t.Fatalf("resume: %s", r.Body)
		}
		_, _, err := subscriptions.DeliveryMaterialize(context.Background(), e.srv.DB, e.tasks, stale.ID, 100)
		if err != subscriptions.ErrHistoryExpired {
			t.Fatalf("materialising a subscription whose unread events were purged: %v, want EVENT_HISTORY_EXPIRED", err)
		}
		if s := e.subscription(t, c, stale.ID); s.CursorSequence != 0 || s.PendingCount != 0 {
			t.Errorf("stale subscription moved: %+v", s)
		}
	})
}

// createPaused stores a subscription of c's queue from sequence 0 that is
// paused from the start, in one transaction, so the materialiser never
// sees it enabled.
func createPaused(t *testing.T, e *env, c servertest.Credential, name string) subscriptions.SubscriptionView {
	t.Helper()
	var zero uint64
	var id string
	err := db.Tx(context.Background(), e.srv.DB, func(tx *sql.Tx) error {
		s, err := subscriptions.SubscriptionCreate(context.Background(), tx, e.tasks, &subscriptions.SubscriptionCreateParams{
			NamespaceID: c.NamespaceID, QueueID: c.QueueID, CredentialID: c.CredentialID, Name: name,
			FromSequence: &zero, MaxPending: 100, MaxAttempts: 20,
		})
		if err != nil {
			return err
		}
		id = s.ID
		_, err = tx.Exec(`UPDATE subscriptions SET enabled = 0 WHERE id = ?`, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := e.subscription(t, c, id)
	if s.Enabled || s.CursorSequence != 0 {
		t.Fatalf("%+v, want paused at cursor 0", s)
	}
	return s
}

// purge ages the first n events of a queue's log and purges them.
func purge(t *testing.T, e *env, queueID string, n int) {
	t.Helper()
	if _, err := e.srv.DB.Exec(`UPDATE result_events SET occurred_at = ? WHERE queue_id = ? AND sequence <= ?`,
		db.Now().Add(-30*24*time.Hour), queueID, n); err != nil {
		t.Fatal(err)
	}
	deleted, err := tasks.EventPurge(context.Background(), e.srv.DB, &tasks.EventPurgeParams{QueueID: queueID, Cutoff: db.Now().Add(-24 * time.Hour), Batch: 1000, Holds: []tasks.RetentionHold{e.mod}})
	if err != nil || deleted != n {
		t.Fatalf("purged %d events (%v), want %d", deleted, err, n)
	}
}
