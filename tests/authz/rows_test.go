package authz_test

import (
	"fmt"
	"net/http"

	"github.com/orbitrun/orbit/internal/auth"
)

// scope says how a route answers a caller that is authenticated and holds
// the route's permission but has no right to the owner's resource.
type scope int

const (
	// public routes answer everyone, with or without a credential.
	public scope = iota
	// self routes answer about the caller's own credential only.
	self
	// queued resources (tasks, and a queue named in a body or a hello) are
	// visible to every credential of their namespace that holds a grant
	// on their queue (T-3, docs/api/tasks.md); any other caller gets 404
	// NOT_FOUND, as for one that does not exist (C-3).
	queued
	// owned resources (a subscription, its deliveries) belong to the
	// credential that created them: every other credential gets 404
	// NOT_FOUND, even in the same namespace on the same queue (S-1).
	owned
	// queueList lists a queue: 404 for a queue outside the caller's
	// grants, only the queue's own rows otherwise.
	queueList
	// ownedList lists the caller's own resources on a queue: 404 for a
	// queue outside its grants, and never another credential's rows.
	ownedList
	// grants lists the queues granted to the caller: 200 for any
	// credential, with its own queues and no other.
	grants
	// console routes (O-9) are the web console's: they authenticate with
	// the console's session cookie only, never an Authorization header,
	// and every write also needs the session's CSRF token. The matrix's
	// callers send bearer headers and no cookie, so every one of them,
	// the owner included, gets the row's answer (console below): a GET of
	// a signed-in page is sent to the sign-in page (303), a POST is
	// refused (403), and no answer carries the owner's data. Behind the
	// cookie each page calls the API handler its row names in process,
	// with the same checks; tests/console checks those cells in a browser
	// (another namespace 404, no events:manage 403, forged CSRF 403).
	console
	// queuedItems are batches whose items each name a queue (T-batch):
	// the batch answers 200 and an item on a queue outside the caller's
	// grants gets 404 NOT_FOUND in its result, read exactly like an item
	// on a queue that does not exist, and stores nothing.
	queuedItems
)

func (s scope) String() string {
	return [...]string{"public", "self", "queued", "owned", "queueList", "ownedList", "grants", "console", "queuedItems"}[s]
}

// target names what a request acts on: the owner's real resources, random
// IDs of nothing, or a caller's own resources.
type target struct {
	Queue, Task, Subscription, Delivery string
}

// request is one HTTP request, or one WebSocket upgrade and its hello.
type request struct {
	method, path, body string
	// entry is set for a WebSocket entry.
	entry *entry
}

// write reports whether the request changes something and so needs an
// Idempotency-Key (C-13).
func (r request) write() bool { return r.method == http.MethodPost || r.method == http.MethodDelete }

// entry is the upgrade of a WebSocket entry and the hello sent after it.
type entry struct {
	subprotocol, helloType string
	hello                  map[string]any
}

// row is the authorization contract of one route.
type row struct {
	// route is "METHOD /template" as the router holds it, or
	// "WS /template" for a WebSocket entry (a route without methods).
	route string
	// variant names a second row of the same route, for a query that
	// takes another path through its handler.
	variant string
	// permission is what the route requires (C-3); "" for any credential
	// (or, with scope public, for no credential at all).
	permission string
	scope      scope
	// mixed routes name a subscription and one of its deliveries: a
	// caller is also refused the owner's delivery under its own
	// subscription.
	mixed bool
	// ownMayBeEmpty is set for a list in which the caller's own queue may
	// well hold nothing (nothing of its own is stuck).
	ownMayBeEmpty bool
	// request builds the route's request on a target.
	request func(t target) request
	// console is what every caller of a console row gets: the status,
	// and for a redirect its Location.
	console consoleAnswer
}

// consoleAnswer is the answer of a console route to a request without a
// session cookie.
type consoleAnswer struct {
	status   int
	location string
}

var (
	toSignIn = consoleAnswer{http.StatusSeeOther, "/console/signin"}
	refused  = consoleAnswer{status: http.StatusForbidden}
)

// name is the row's name in the test's output.
func (r row) name() string {
	if r.variant == "" {
		return r.route
	}
	return r.route + " (" + r.variant + ")"
}

// probeRevision is the expected_revision of every write of the matrix: so
// stale that the owner's own request passes authorization and then fails
// with 409 STATE_CONFLICT, so that the controls change nothing.
const probeRevision = "999999"

// probeCount is the expected_count of every bulk write of the matrix: more
// than what the owner's subscription holds to retry or replay, so that the
// owner's own request fails with 409 STATE_CONFLICT and changes nothing.
const probeCount = 1000

// rows is the matrix: a row per route of the server, read from its
// router, and a variant row where a query takes another path through the
// handler (stuck-work reports, dry runs). TestF4_AuthorizationMatrix fails
// for a route without a row: a new route gets its row here, with its
// permission and scope.
var rows = []row{
	{route: "GET /healthz", scope: public, request: get("/healthz")},

	// The console (O-9): cookie sessions, see the scope console.
	{route: "GET /console/", scope: console, console: consoleAnswer{http.StatusSeeOther, "/console/queues"}, request: get("/console/")},
	{route: "GET /console/static/{file}", scope: console, console: consoleAnswer{status: http.StatusOK}, request: get("/console/static/console.css")},
	{route: "GET /console/signin", scope: console, console: consoleAnswer{status: http.StatusOK}, request: get("/console/signin")},
	{route: "POST /console/signin", scope: console, console: refused, request: func(target) request {
		return request{method: http.MethodPost, path: "/console/signin", body: "token=probe"}
	}},
	{route: "POST /console/signout", scope: console, console: refused, request: consolePost("/console/signout")},
	{route: "GET /console/queues", scope: console, console: toSignIn, request: get("/console/queues")},
	{route: "GET /console/live/queues", scope: console, console: toSignIn, request: get("/console/live/queues")},
	{route: "GET /console/tasks", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/tasks?queue_id=" + t.Queue}
	}},
	{route: "GET /console/tasks/{id}", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/tasks/" + t.Task}
	}},
	{route: "POST /console/tasks/{id}/cancel", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/tasks/" + t.Task + "/cancel")(t)
	}},
	{route: "POST /console/tasks/{id}/review", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/tasks/" + t.Task + "/review")(t)
	}},
	{route: "GET /console/subscriptions", scope: console, console: toSignIn, request: get("/console/subscriptions")},
	{route: "GET /console/subscriptions/{id}", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/subscriptions/" + t.Subscription}
	}},
	{route: "GET /console/live/subscriptions/{id}", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/live/subscriptions/" + t.Subscription}
	}},
	{route: "GET /console/subscriptions/{id}/deliveries", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/subscriptions/" + t.Subscription + "/deliveries"}
	}},
	{route: "GET /console/subscriptions/{id}/deliveries/{delivery_id}", scope: console, console: toSignIn, request: func(t target) request {
		return request{method: http.MethodGet, path: "/console/subscriptions/" + t.Subscription + "/deliveries/" + t.Delivery}
	}},
	{route: "POST /console/subscriptions/{id}/deliveries/{delivery_id}/retry", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/deliveries/" + t.Delivery + "/retry")(t)
	}},
	{route: "POST /console/subscriptions/{id}/pause", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/pause")(t)
	}},
	{route: "POST /console/subscriptions/{id}/resume", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/resume")(t)
	}},
	{route: "POST /console/subscriptions/{id}/retry", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/retry")(t)
	}},
	{route: "POST /console/subscriptions/{id}/replay", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/replay")(t)
	}},
	{route: "POST /console/subscriptions/{id}/skip", scope: console, console: refused, request: func(t target) request {
		return consolePost("/console/subscriptions/" + t.Subscription + "/skip")(t)
	}},
	{route: "GET /readyz", scope: public, request: get("/readyz")},
	{route: "GET /v1/credential", scope: self, request: get("/v1/credential")},
	{route: "GET /v1/queues", scope: grants, request: get("/v1/queues")},

	{route: "POST /v1/tasks", permission: auth.PermTasksSubmit, scope: queued, request: func(t target) request {
		return post("/v1/tasks", `{"queue_id":%q,"input":{"probe":"authz"}}`, t.Queue)
	}},
	{route: "POST /v1/tasks:batch", permission: auth.PermTasksSubmit, scope: queuedItems, request: func(t target) request {
		// The item's key differs per queue (the owner's controls send one
		// batch on its queue and one on a queue of nothing) and is echoed
		// in the answer, so it holds only half of the queue's id.
		return post("/v1/tasks:batch", `{"tasks":[{"idempotency_key":"authz-%s","queue_id":%q,"input":{"probe":"authz"}}]}`, t.Queue[:16], t.Queue)
	}},
	{route: "GET /v1/tasks", permission: auth.PermTasksRead, scope: queueList, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/tasks?queue_id=" + t.Queue}
	}},
	{route: "GET /v1/tasks", variant: "stuck work", permission: auth.PermTasksRead, scope: queueList, ownMayBeEmpty: true, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/tasks?state=RUNNING&older_than_ms=0&queue_id=" + t.Queue}
	}},
	{route: "GET /v1/tasks/{id}", permission: auth.PermTasksRead, scope: queued, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/tasks/" + t.Task}
	}},
	{route: "POST /v1/tasks/{id}:cancel", permission: auth.PermTasksCancel, scope: queued, request: func(t target) request {
		return post("/v1/tasks/"+t.Task+":cancel", `{"reason":"authz probe"}`)
	}},
	{route: "POST /v1/tasks/{id}:review", permission: auth.PermTasksReview, scope: queued, request: func(t target) request {
		return post("/v1/tasks/"+t.Task+":review", `{"expected_revision":%q,"resolution":"failed","reason":"authz probe"}`, probeRevision)
	}},

	{route: "POST /v1/subscriptions", permission: auth.PermEventsManage, scope: queued, request: func(t target) request {
		return post("/v1/subscriptions", `{"name":"authz-probe","queue_id":%q}`, t.Queue)
	}},
	{route: "GET /v1/subscriptions", permission: auth.PermEventsRead, scope: ownedList, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/subscriptions?queue_id=" + t.Queue}
	}},
	{route: "GET /v1/subscriptions/{id}", permission: auth.PermEventsRead, scope: owned, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/subscriptions/" + t.Subscription}
	}},
	{route: "POST /v1/subscriptions/{id}:configure", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+":configure", `{"expected_revision":%q,"enabled":false,"reason":"authz probe"}`, probeRevision)
	}},
	{route: "GET /v1/subscriptions/{id}/deliveries", permission: auth.PermEventsRead, scope: owned, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/subscriptions/" + t.Subscription + "/deliveries"}
	}},
	{route: "GET /v1/subscriptions/{id}/deliveries", variant: "stuck work", permission: auth.PermEventsRead, scope: owned, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/subscriptions/" + t.Subscription + "/deliveries?state=LEASED&older_than_ms=0"}
	}},
	{route: "POST /v1/subscriptions/{id}/deliveries:retry", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+"/deliveries:retry",
			`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"authz probe","expected_count":%d}`, probeCount)
	}},
	{route: "POST /v1/subscriptions/{id}:replay", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+":replay",
			`{"from_sequence":"1","to_sequence":"1","reason":"authz probe","expected_count":%d}`, probeCount)
	}},
	{route: "POST /v1/subscriptions/{id}/deliveries:retry", variant: "dry run", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+"/deliveries:retry",
			`{"filter":{"state":"EXPIRED"},"additional_attempts":1,"reason":"authz probe","dry_run":true}`)
	}},
	{route: "POST /v1/subscriptions/{id}:replay", variant: "dry run", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+":replay", `{"from_sequence":"1","to_sequence":"1","reason":"authz probe","dry_run":true}`)
	}},
	{route: "POST /v1/subscriptions/{id}:skip", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+":skip", `{"to_sequence":"head","expected_revision":%q,"reason":"authz probe"}`, probeRevision)
	}},
	{route: "DELETE /v1/subscriptions/{id}", permission: auth.PermEventsManage, scope: owned, request: func(t target) request {
		return request{method: http.MethodDelete, path: "/v1/subscriptions/" + t.Subscription,
			body: fmt.Sprintf(`{"expected_revision":%q,"reason":"authz probe"}`, probeRevision)}
	}},
	{route: "GET /v1/subscriptions/{id}/deliveries/{delivery_id}", permission: auth.PermEventsRead, scope: owned, mixed: true, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/subscriptions/" + t.Subscription + "/deliveries/" + t.Delivery}
	}},
	{route: "POST /v1/subscriptions/{id}/deliveries/{delivery_id}:retry", permission: auth.PermEventsManage, scope: owned, mixed: true, request: func(t target) request {
		return post("/v1/subscriptions/"+t.Subscription+"/deliveries/"+t.Delivery+":retry",
			`{"expected_revision":%q,"reason":"authz probe","additional_attempts":1}`, probeRevision)
	}},

	// The WebSocket entries check the credential and the entry's
	// permission before the upgrade (E-1), and the subscription's owner
	// or the queue's grant at the hello (E-2, T-3): an error frame without
	// session_id, then close 1008.
	{route: "WS /v1/events/connect", permission: auth.PermEventsConsume, scope: owned, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/events/connect", entry: &entry{
			subprotocol: "orbit.events.v1", helloType: "events.hello",
			hello: map[string]any{"subscription_id": t.Subscription, "capacity": 1},
		}}
	}},
	{route: "WS /v1/workers/connect", permission: auth.PermTasksWork, scope: queued, request: func(t target) request {
		return request{method: http.MethodGet, path: "/v1/workers/connect", entry: &entry{
			subprotocol: "orbit.workers.v1", helloType: "worker.hello",
			hello: map[string]any{"queue_id": t.Queue, "capacity": 1},
		}}
	}},
}

// get returns the builder of a GET of path, which names no resource.
func get(path string) func(target) request {
	return func(target) request { return request{method: http.MethodGet, path: path} }
}

// consolePost returns the builder of a console form POST of path: a
// confirmed change with a stale revision and count, and no CSRF token.
func consolePost(path string) func(target) request {
	return func(target) request {
		return request{method: http.MethodPost, path: path,
			body: "step=confirm&expected_revision=" + probeRevision + "&expected_count=1000&additional_attempts=1&resolution=failed&reason=authz+probe"}
	}
}

// post returns a POST of path with the body format filled with args.
func post(path, format string, args ...any) request {
	return request{method: http.MethodPost, path: path, body: fmt.Sprintf(format, args...)}
}
