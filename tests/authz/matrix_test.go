package authz_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// closePolicyViolation closes a connection whose hello was refused (E-2).
const closePolicyViolation = 1008

// kind is how a caller falls short.
type kind int

const (
	// unauthenticated callers have no valid credential: 401 everywhere
	// but on the public routes (C-1).
	unauthenticated kind = iota
	// lacksPermission callers are in the owner's scope with a grant on
	// its queue but without the route's permission: 403 (C-3).
	lacksPermission
	// otherScope callers hold every permission but are not entitled to
	// the owner's resources: 404, as for what does not exist (C-3, S-1).
	otherScope
)

// caller is one way of asking.
type caller struct {
	// auth are the Authorization header values sent; nil sends none.
	auth []string
	cred *servertest.Credential
	kind kind
	// own are the caller's own resources, where it has any.
	own target
	// sharesQueue is set for a credential of the owner's namespace with a
	// grant on the owner's queue: the queue's tasks are its too (T-3).
	sharesQueue bool
	// foreign is what the caller must never be shown.
	foreign []secret
}

// column is one column of the matrix: a way of lacking the right to the
// owner's resources. callers returns who asks for row r.
type column struct {
	name    string
	callers func(r row) []*caller
}

// answer is what a request got: an HTTP reply, an upgrade refusal, or the
// frame answering a hello (status 101).
type answer struct {
	status        int
	code, message string
	sessionID     string
	raw           []byte
	data          json.RawMessage
}

// matrix is the server, the owner and what the test knows of them.
type matrix struct {
	srv   *servertest.Server
	owner *owner
	// owned, queued and scoped are the owner's data (ownerData) and its
	// namespace, application and environment IDs.
	owned, queued []secret
	namespace     secret
	application   []secret
	// missing holds, per route, the owner's own answer for resources
	// that do not exist; missingDelivery, per mixed route, for a delivery
	// that does not exist under the owner's subscription. A refusal must
	// read exactly like them (C-3: do not reveal that it exists).
	missing, missingDelivery map[string]answer
	keys                     int
}

// TestF4_AuthorizationMatrix asks for a first credential's real resources
// (a subscription, a task a worker completed, the delivery of its
// task.succeeded event) on every route of the server and both WebSocket
// entries, in every way a caller may lack the right to them, and checks
// the C-7 status and code of each refusal, that a refusal of a resource
// reads exactly like the refusal of one that does not exist, that lists
// show another scope none of the owner's rows, and that no answer carries
// the owner's data. The routes are read from the router: a route without
// a row in rows fails the test.
func TestF4_AuthorizationMatrix(t *testing.T) {
	srv := servertest.Start(t)
	m := &matrix{srv: srv, owner: newOwner(t, srv), missing: map[string]answer{}, missingDelivery: map[string]answer{}}
	o := m.owner
	m.namespace = secret{"namespace id", o.cred.NamespaceID}
	m.application = []secret{{"application id", o.cred.ApplicationID}, {"environment id", o.cred.EnvironmentID}}

	covered := m.coverage(t)
	ownerAuth := []string{"Bearer " + o.cred.Token}

	// Controls: the owner's own requests pass authorization, so that the
	// refusals below are the callers', and the requests are well formed,
	// so that no 400 hides a missing check. Their answers for what does not
	// exist are what every refusal must read like; they run outside
	// subtests, as every column needs them.
	for _, r := range covered {
		if r.scope == public || r.scope == console {
			continue
		}
		req := r.request(o.real)
		if req.entry == nil {
			a := m.send(t, ownerAuth, req, false)
			switch {
			case !req.write() && a.status != http.StatusOK:
				t.Errorf("%s by its owner: %d %s, want 200", r.name(), a.status, a.raw)
			case req.write() && slices.Contains([]int{400, 401, 403, 404}, a.status):
				t.Errorf("%s by its owner: %d %s, want it past authorization and validation", r.name(), a.status, a.raw)
			}
		}
		if r.scope == self || r.scope == grants {
			continue
		}
		miss := m.send(t, ownerAuth, r.request(randomTarget()), req.entry != nil)
		if r.scope == queuedItems {
			miss = itemAnswer(t, r.name()+" of nothing", miss)
		}
		m.wantCode(t, r.name()+" of nothing", miss, httpx.CodeNotFound, req.entry != nil)
		m.missing[r.name()] = miss
		if r.mixed {
			miss := m.send(t, ownerAuth, r.request(target{Subscription: o.real.Subscription, Delivery: randomTarget().Delivery}), false)
			m.wantCode(t, r.name()+" of no delivery", miss, httpx.CodeNotFound, false)
			m.missingDelivery[r.name()] = miss
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	m.owned, m.queued = ownerData(t, srv, o)

	anotherNamespace := m.stranger(t, servertest.CredentialParams{Namespace: "other-ns"}, true)
	anotherApplication := m.stranger(t, servertest.CredentialParams{Application: "other-app", Queue: "q-other-app"}, true)
	queueNotGranted := m.stranger(t, servertest.CredentialParams{NoQueueGrant: true}, false)
	var onTheQueue []*caller
	for _, application := range []string{"app", "other-app"} {
		c := m.stranger(t, servertest.CredentialParams{Application: application}, false)
		c.sharesQueue = true
		c.foreign = m.foreignTo(c)
		onTheQueue = append(onTheQueue, c)
	}
	// One credential per permission of a route, in the owner's scope with
	// a grant on its queue and every other permission.
	lacking := map[string]*caller{}
	for _, r := range covered {
		if _, ok := lacking[r.permission]; ok || r.permission == "" {
			continue
		}
		cred := srv.Credential(t, servertest.CredentialParams{Permissions: slices.DeleteFunc(slices.Clone(auth.AllPermissions),
			func(p string) bool { return p == r.permission })})
		c := &caller{auth: []string{"Bearer " + cred.Token}, cred: &cred, kind: lacksPermission, sharesQueue: true}
		c.foreign = m.foreignTo(c)
		lacking[r.permission] = c
	}
	// A route without a permission is asked by a credential without any.
	bare := srv.Credential(t, servertest.CredentialParams{})
	lacking[""] = &caller{auth: []string{"Bearer " + bare.Token}, cred: &bare, kind: lacksPermission, sharesQueue: true}
	lacking[""].foreign = m.foreignTo(lacking[""])
	nobody := func(values ...[]string) func(row) []*caller {
		var out []*caller
		for _, v := range values {
			c := &caller{auth: v, kind: unauthenticated}
			c.foreign = m.foreignTo(c)
			out = append(out, c)
		}
		return func(row) []*caller { return out }
	}
	one := func(c *caller) func(row) []*caller { return func(row) []*caller { return []*caller{c} } }

	columns := []column{
		{"NoToken", nobody(nil)},
		// A malformed header carrying the owner's real token must not
		// authenticate: without its scheme, with a trailing field, twice.
		{"MalformedHeader", nobody(
			[]string{o.cred.Token},
			[]string{"Bearer " + o.cred.Token + " extra"},
			[]string{"Bearer " + o.cred.Token, "Bearer " + o.cred.Token},
			[]string{"Basic b3JiaXQ6c2VjcmV0"},
		)},
		{"AnotherNamespace", one(anotherNamespace)},
		// Another application of the owner's namespace, on a queue of
		// its own: queues belong to the namespace and are shared only by
		// grant.
		{"AnotherApplication", one(anotherApplication)},
		{"MissingPermission", func(r row) []*caller { return []*caller{lacking[r.permission]} }},
		{"QueueNotGranted", one(queueNotGranted)},
		// Another credential holding a grant on the owner's queue, of the
		// owner's application and of another one: subscriptions and
		// their deliveries are still the owner's alone (S-1); tasks are
		// the queue's (T-3).
		{"AnotherCredentialOnTheQueue", func(row) []*caller { return onTheQueue }},
	}

	before := m.state(t)
	for _, col := range columns {
		t.Run(col.name, func(t *testing.T) {
			for _, r := range covered {
				t.Run(r.name(), func(t *testing.T) {
					for _, c := range col.callers(r) {
						m.cell(t, r, c)
					}
				})
			}
		})
	}

	// Credentials do not expire. The brief ends a credential only by
	// revocation (C-1: "an unknown or revoked token"), and the identity
	// tables record created_at and revoked_at and no validity period, so
	// there is no expired credential to ask with: the Revoked column below
	// is the end of a credential. Should credentials gain an expiry, this
	// fails, and the matrix needs an Expired column.
	t.Run("Expired", func(t *testing.T) {
		expiry := regexp.MustCompile(`(?i)expir|valid|until|ttl|not_after|lifetime`)
		rows, err := srv.DB.Query(`SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('credentials', 'credential_permissions', 'credential_queue_grants')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var table, column string
			if err := rows.Scan(&table, &column); err != nil {
				t.Fatal(err)
			}
			n++
			if expiry.MatchString(column) {
				t.Errorf("%s.%s looks like an expiry: credentials can expire now; add an Expired column to the matrix", table, column)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("the identity tables have no columns: the check read nothing")
		}
	})

	if after := m.state(t); after != before {
		t.Errorf("the refused requests changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Past the hello, a session of another credential on its own
	// subscription or queue names the owner's delivery or task. (Its own
	// deliveries may be leased to it meanwhile, so this runs after the
	// comparison of the database.)
	t.Run("SessionFrames", func(t *testing.T) {
		m.checkSessionFrames(t, append([]*caller{anotherNamespace, anotherApplication}, onTheQueue...))
	})

	// Last, the owner itself revoked, asking for its own resources.
	if err := adminRevoke(srv, o.cred.CredentialID); err != nil {
		t.Fatal(err)
	}
	t.Run("Revoked", func(t *testing.T) {
		revoked := nobody(ownerAuth)
		for _, r := range covered {
			t.Run(r.name(), func(t *testing.T) {
				for _, c := range revoked(r) {
					m.cell(t, r, c)
				}
			})
		}
	})
}

// coverage checks that every route of the router has a row and every row
// a route, and returns the rows of the routes.
func (m *matrix) coverage(t *testing.T) []row {
	t.Helper()
	byRoute := map[string][]row{}
	names := map[string]bool{}
	for _, r := range rows {
		if names[r.name()] {
			t.Errorf("two rows for %s", r.name())
		}
		names[r.name()] = true
		byRoute[r.route] = append(byRoute[r.route], r)
	}
	var covered []row
	seen := map[string]bool{}
	for _, route := range m.srv.Routes {
		keys := []string{"WS " + route.Path}
		if len(route.Methods) > 0 {
			keys = keys[:0]
			for _, method := range route.Methods {
				keys = append(keys, method+" "+route.Path)
			}
		}
		for _, key := range keys {
			rs, ok := byRoute[key]
			if !ok {
				t.Errorf("route %s has no row in the authorization matrix: every route needs one (F-4); "+
					"add it to rows in tests/authz/rows_test.go with its permission and scope", key)
				continue
			}
			seen[key] = true
			covered = append(covered, rs...)
		}
	}
	for _, r := range rows {
		if !seen[r.route] {
			t.Errorf("row %s names no route of the server: correct or remove it", r.name())
		}
	}
	for _, entry := range []string{"WS /v1/events/connect", "WS /v1/workers/connect"} {
		if !seen[entry] {
			t.Errorf("the router has no WebSocket entry %s", entry)
		}
	}
	return covered
}

// stranger returns a caller of another scope with every permission (see
// the function stranger).
func (m *matrix) stranger(t *testing.T, p servertest.CredentialParams, ownTask bool) *caller {
	t.Helper()
	cred, own := stranger(t, m.srv, p, ownTask)
	c := &caller{auth: []string{"Bearer " + cred.Token}, cred: &cred, kind: otherScope, own: own}
	c.foreign = m.foreignTo(c)
	return c
}

// foreignTo returns what c must never be shown: the owner's subscriptions
// and deliveries always; the owner's queue and its tasks and events unless
// c shares the queue; the owner's namespace, application and environment
// IDs unless they are c's too. An unauthenticated caller is shown nothing.
func (m *matrix) foreignTo(c *caller) []secret {
	out := slices.Clone(m.owned)
	if c.cred == nil {
		out = append(out, m.queued...)
		out = append(out, m.namespace)
		return append(out, m.application...)
	}
	if !c.sharesQueue {
		out = append(out, m.queued...)
	}
	if c.cred.NamespaceID != m.owner.cred.NamespaceID {
		out = append(out, m.namespace)
	}
	if c.cred.ApplicationID != m.owner.cred.ApplicationID {
		out = append(out, m.application...)
	}
	return out
}

// cell asks for row r's resources as c and checks the answer.
func (m *matrix) cell(t *testing.T, r row, c *caller) {
	t.Helper()
	real := m.owner.real
	switch {
	case r.scope == console:
		m.consoleCell(t, r, c)

	case r.scope == public:
		a := m.send(t, c.auth, r.request(real), false)
		if a.status != http.StatusOK {
			t.Errorf("public %s: %d %s, want 200 whoever asks", r.name(), a.status, a.raw)
		}
		m.noLeak(t, r.name(), a, c)

	case c.kind == unauthenticated:
		a := m.send(t, c.auth, r.request(real), false)
		m.wantStatus(t, r.name(), a, http.StatusUnauthorized, httpx.CodeUnauthenticated)
		if a.message != auth.ErrUnauthenticated.Message {
			t.Errorf("%s: message %q, want the one of every 401, which never says why", r.name(), a.message)
		}
		m.noLeak(t, r.name(), a, c)

	case c.kind == lacksPermission && r.permission != "":
		a := m.send(t, c.auth, r.request(real), false)
		m.wantStatus(t, r.name(), a, http.StatusForbidden, httpx.CodePermissionDenied)
		m.noLeak(t, r.name(), a, c)

	case r.scope == self:
		// No permission is needed; the answer is the caller's own
		// credential.
		a := m.send(t, c.auth, r.request(real), false)
		var got struct {
			ID string `json:"id"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.data, &got) != nil || got.ID != c.cred.CredentialID {
			t.Errorf("%s: %d %s, want 200 with the caller's own credential %s", r.name(), a.status, a.raw, c.cred.CredentialID)
		}
		m.noLeak(t, r.name(), a, c)

	case r.scope == grants:
		// No permission is needed; the answer lists the caller's own
		// granted queues, the owner's only when the caller shares it.
		a := m.send(t, c.auth, r.request(real), false)
		if a.status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200 with the caller's granted queues", r.name(), a.status, a.raw)
		}
		if c.own.Queue != "" && !bytes.Contains(a.raw, []byte(c.own.Queue)) {
			t.Errorf("%s: %s does not list the caller's own queue %s", r.name(), a.raw, c.own.Queue)
		}
		m.noLeak(t, r.name(), a, c)

	case (r.scope == queued || r.scope == queueList || r.scope == queuedItems) && c.sharesQueue:
		// Not a refusal: the caller holds a grant on the owner's queue
		// in its namespace, and tasks are the queue's (T-3,
		// docs/api/tasks.md), so is a worker session on it.
		t.Logf("%s: shared with every credential granted the queue; nothing to refuse", r.name())

	case r.scope == queued || r.scope == owned:
		m.refusedAsMissing(t, r, c, real, m.missing[r.name()])
		if r.mixed && c.own.Subscription != "" {
			// The owner's delivery under the caller's own subscription.
			m.refusedAsMissing(t, r, c, target{Subscription: c.own.Subscription, Delivery: real.Delivery}, m.missingDelivery[r.name()])
		}

	case r.scope == queuedItems:
		// The batch is judged; its one item is refused as if its queue
		// did not exist.
		a := m.send(t, c.auth, r.request(real), false)
		item := itemAnswer(t, r.name(), a)
		m.wantCode(t, r.name(), item, httpx.CodeNotFound, false)
		if item.message != m.missing[r.name()].message {
			t.Errorf("%s: item message %q tells the owner's queue apart from one that does not exist (%q)", r.name(), item.message, m.missing[r.name()].message)
		}
		m.noLeak(t, r.name(), a, c)

	case r.scope == queueList || r.scope == ownedList:
		if c.sharesQueue {
			// The owner's queue is granted: the list answers, with
			// the caller's rows only.
			m.listed(t, r, c, real)
		} else {
			m.refusedAsMissing(t, r, c, real, m.missing[r.name()])
		}
		if c.own.Queue != "" && c.own.Queue != real.Queue {
			m.listed(t, r, c, c.own)
		}

	default:
		t.Fatalf("%s: no expectation for scope %s and caller kind %d", r.name(), r.scope, c.kind)
	}
}

// consoleCell asks for a console route's page with c's Authorization
// header and no session cookie: the header is not a session, so the
// answer is the row's whoever asks, and carries nothing of the owner's.
func (m *matrix) consoleCell(t *testing.T, r row, c *caller) {
	t.Helper()
	req := r.request(m.owner.real)
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	hr, err := http.NewRequest(req.method, m.srv.URL+req.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range c.auth {
		hr.Header.Add("Authorization", v)
	}
	if req.body != "" {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	hc.CloseIdleConnections()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != r.console.status || resp.Header.Get("Location") != r.console.location {
		t.Errorf("%s: %d to %q, want %d to %q", r.name(), resp.StatusCode, resp.Header.Get("Location"), r.console.status, r.console.location)
	}
	m.noLeak(t, r.name(), answer{status: resp.StatusCode, raw: raw}, c)
}

// itemAnswer is the answer to the one item of a batch answered by a: its
// result's status, code and message, for a batch that was judged (200).
func itemAnswer(t *testing.T, name string, a answer) answer {
	t.Helper()
	var reply struct {
		Results []struct {
			Status int `json:"status"`
			Error  *struct {
				Code, Message string
			} `json:"error"`
		} `json:"results"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.data, &reply) != nil || len(reply.Results) != 1 {
		t.Errorf("%s: %d %s, want 200 with the result of the batch's one item", name, a.status, a.raw)
		return a
	}
	item := answer{status: reply.Results[0].Status, raw: a.raw, data: a.data}
	if e := reply.Results[0].Error; e != nil {
		item.code, item.message = e.Code, e.Message
	}
	return item
}

// refusedAsMissing asks as c for row r's request on tgt and checks that it
// is NOT_FOUND (an error frame and close 1008 after the hello of an entry)
// with the message of ref, the answer for what does not exist, and
// carries nothing of the owner's.
func (m *matrix) refusedAsMissing(t *testing.T, r row, c *caller, tgt target, ref answer) {
	t.Helper()
	req := r.request(tgt)
	a := m.send(t, c.auth, req, req.entry != nil)
	m.wantCode(t, r.name(), a, httpx.CodeNotFound, req.entry != nil)
	if a.message != ref.message {
		t.Errorf("%s: message %q tells the owner's resource apart from one that does not exist (%q)", r.name(), a.message, ref.message)
	}
	m.noLeak(t, r.name(), a, c)
}

// listed asks as c for row r's list of tgt's queue and checks that it
// answers 200 with rows, none of them the owner's.
func (m *matrix) listed(t *testing.T, r row, c *caller, tgt target) {
	t.Helper()
	a := m.send(t, c.auth, r.request(tgt), false)
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.data, &page) != nil {
		t.Errorf("%s of the caller's queue: %d %s, want 200 and a page", r.name(), a.status, a.raw)
		return
	}
	if len(page.Items) == 0 && !r.ownMayBeEmpty {
		t.Errorf("%s of the caller's queue is empty: the caller's own rows are missing", r.name())
	}
	m.noLeak(t, r.name(), a, c)
}

// wantStatus checks an HTTP answer (or an upgrade refusal) against status
// and code.
func (m *matrix) wantStatus(t *testing.T, what string, a answer, status int, code httpx.Code) {
	t.Helper()
	if a.status != status || a.code != string(code) {
		t.Errorf("%s: %d %s, want %d %s: %s", what, a.status, a.code, status, code, a.raw)
	}
}

// wantCode checks for code: as an HTTP reply, or, for an entry, as the
// error frame answering the hello, without session_id (E-2).
func (m *matrix) wantCode(t *testing.T, what string, a answer, code httpx.Code, entry bool) {
	t.Helper()
	if !entry {
		m.wantStatus(t, what, a, code.Status(), code)
		return
	}
	if a.status != http.StatusSwitchingProtocols || a.code != string(code) || a.sessionID != "" {
		t.Errorf("%s: hello answered %s (upgrade %d), want an error frame %s without session_id", what, a.raw, a.status, code)
	}
}

// noLeak checks that a carries nothing c must not see.
func (m *matrix) noLeak(t *testing.T, what string, a answer, c *caller) {
	t.Helper()
	for _, s := range c.foreign {
		if bytes.Contains(a.raw, []byte(s.value)) {
			t.Errorf("%s: the answer carries the owner's %s %s: %s", what, s.what, s.value, a.raw)
		}
	}
}

// send sends req with the Authorization values authValues (none when nil).
// For an entry, upgrade says whether the upgrade is expected: then the
// hello is sent and its answer returned (status 101); otherwise the
// upgrade's refusal is returned.
func (m *matrix) send(t *testing.T, authValues []string, req request, upgrade bool) answer {
	t.Helper()
	if req.entry != nil {
		return m.sendEntry(t, authValues, req, upgrade)
	}
	h := http.Header{}
	for _, v := range authValues {
		h.Add("Authorization", v)
	}
	var body io.Reader
	if req.write() {
		m.keys++
		h.Set("Idempotency-Key", fmt.Sprintf("authz-%d", m.keys))
		h.Set("Content-Type", "application/json")
		body = strings.NewReader(req.body)
	}
	hr, err := http.NewRequest(req.method, m.srv.URL+req.path, body)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header = h
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var env servertest.Response
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: reply is not an envelope: %s", req.method, req.path, raw)
	}
	a := answer{status: resp.StatusCode, raw: raw, data: env.Data}
	if env.Error != nil {
		a.code, a.message = env.Error.Code, env.Error.Message
	}
	return a
}

// sendEntry opens the entry of req (see send).
func (m *matrix) sendEntry(t *testing.T, authValues []string, req request, upgrade bool) answer {
	t.Helper()
	o := wstest.Options{URL: "ws" + strings.TrimPrefix(m.srv.URL, "http") + req.path, Subprotocol: req.entry.subprotocol, Timeout: waitTime}
	if authValues != nil {
		o.Header = http.Header{"Authorization": authValues}
	}
	if !upgrade {
		refusal := wstest.DialRefused(t, o)
		_, code, message, err := refusal.Envelope()
		if err != nil {
			t.Fatalf("upgrade %s: %v", req.path, err)
		}
		return answer{status: refusal.Status, code: code, message: message, raw: refusal.Body}
	}
	c := wstest.Dial(t, o)
	hello := c.NewFrame(req.entry.helloType, req.entry.hello)
	c.SendFrame(hello)
	reply := c.Reply(hello.MessageID)
	a := answer{status: http.StatusSwitchingProtocols, sessionID: reply.SessionID, raw: reply.Raw}
	if reply.Error == nil {
		c.Close()
		return a
	}
	a.code, a.message = reply.Error.Code, reply.Error.Message
	c.ExpectClose(closePolicyViolation)
	return a
}

// state returns what the refused requests must not change: the tasks and
// subscriptions, the owner's delivery, and the counts of idempotency
// records, audit records and sessions.
func (m *matrix) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	dump := func(query string, args ...any) {
		rows, err := m.srv.DB.Query(query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if raw, ok := v.([]byte); ok {
					v = string(raw)
				}
				fmt.Fprintf(&b, "%v ", v)
			}
			b.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	dump(`SELECT id, state, revision FROM tasks ORDER BY id`)
	dump(`SELECT id, revision, enabled FROM subscriptions ORDER BY id`)
	dump(`SELECT id, state, revision, attempts, attempt_budget FROM event_deliveries WHERE subscription_id = ?`, m.owner.real.Subscription)
	dump(`SELECT 'idempotency records', COUNT(*) FROM idempotency_records`)
	dump(`SELECT 'audit records', COUNT(*) FROM audit_log`)
	dump(`SELECT 'worker sessions', COUNT(*) FROM worker_sessions`)
	dump(`SELECT 'event sessions', COUNT(*) FROM event_sessions`)
	return b.String()
}
