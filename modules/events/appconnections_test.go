package events_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/events"
)

// closeTryAgainLater follows a refusal for capacity.
const closeTryAgainLater = 1013

// nodes starts n servers on one database, each with
// events.max_connections_per_app set to perApp, as n nodes of one
// deployment; the first node's credential e.cred serves them all.
func nodes(t *testing.T, n, perApp int) []*env {
	t.Helper()
	pool := testdb.New(t)
	out := make([]*env, n)
	for i := range out {
		srv := servertest.StartOn(t, pool, eventsConfig(func(c *events.Config) {
			c.PollInterval = pollInterval
			c.MaxConnectionsPerApp = perApp
		}))
		out[i] = &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	}
	out[0].cred = out[0].credential(t, servertest.CredentialParams{})
	for _, e := range out[1:] {
		e.cred = out[0].cred
	}
	return out
}

// helloAnswer dials e with cred, says hello on the subscription and returns
// the connection and the answer.
func (e *env) helloAnswer(t testing.TB, cred servertest.Credential, subscriptionID string) (*wstest.Client, *wstest.Frame) {
	t.Helper()
	c := e.dial(t, cred)
	hello := c.NewFrame(typeHello, helloBody{SubscriptionID: subscriptionID, Capacity: 1})
	c.SendFrame(hello)
	return c, c.Reply(hello.MessageID)
}

// wantAppLimit checks that a hello on e is refused because cred's
// application is at its limit: CAPACITY_EXCEEDED naming the key, then the
// close 1013.
func (e *env) wantAppLimit(t testing.TB, cred servertest.Credential, subscriptionID string) {
	t.Helper()
	c, answer := e.helloAnswer(t, cred, subscriptionID)
	wantError(t, answer, "CAPACITY_EXCEEDED")
	if !strings.Contains(answer.Error.Message, "events.max_connections_per_app") {
		t.Fatalf("refusal does not name events.max_connections_per_app: %s", answer)
	}
	c.ExpectClose(closeTryAgainLater)
}

// TestN4_PerAppConnectionLimitHoldsAcrossNodes: with
// events.max_connections_per_app 2 on two nodes of one database, an
// application's third event connection is refused after its hello on
// either node, whichever credential of the application it uses, while
// another application connects; closing one connection frees its slot.
func TestN4_PerAppConnectionLimitHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	n := nodes(t, 2, 2)
	a, b := n[0], n[1]
	sub := a.subscribe(t, a.cred, subscriptionParams{})
	first := a.connect(t, a.cred, sub, 1)
	b.connect(t, a.cred, sub, 1)

	a.wantAppLimit(t, a.cred, sub)
	b.wantAppLimit(t, a.cred, sub)
	// Another credential of the same application shares its limit.
	sibling := a.credential(t, servertest.CredentialParams{Queue: "q2"})
	b.wantAppLimit(t, sibling, a.subscribe(t, sibling, subscriptionParams{}))
	if got := a.count(t, `SELECT COUNT(*) FROM event_sessions WHERE closed_at IS NULL`); got != 2 {
		t.Fatalf("%d open event sessions, want 2: refused hellos record none", got)
	}

	// Another application is not bound by this one's connections.
	other := a.credential(t, servertest.CredentialParams{Application: "other"})
	otherSub := a.subscribe(t, other, subscriptionParams{})
	b.connect(t, other, otherSub, 1)
	a.connect(t, other, otherSub, 1)

	// Closing a connection on one node frees a slot on the other.
	first.Close()
	eventually(t, "a connection on b after one on a closed", func() bool {
		c, answer := b.helloAnswer(t, a.cred, sub)
		if answer.Type == typeWelcome {
			return true
		}
		wantError(t, answer, "CAPACITY_EXCEEDED")
		c.ExpectClose(closeTryAgainLater)
		return false
	})
	a.wantAppLimit(t, a.cred, sub)
}

// TestN4_ConcurrentConnectsNeverExceedTheLimit: many hellos of one
// application sent at once to two nodes are admitted up to
// events.max_connections_per_app and no further; the others are refused
// with CAPACITY_EXCEEDED.
func TestN4_ConcurrentConnectsNeverExceedTheLimit(t *testing.T) {
	t.Parallel()
	const limit, tries = 3, 16
	n := nodes(t, 2, limit)
	sub := n[0].subscribe(t, n[0].cred, subscriptionParams{})
	clients := make([]*wstest.Client, tries)
	for i := range clients {
		clients[i] = n[i%2].dial(t, n[0].cred)
	}
	start := make(chan struct{})
	answers := make([]*wstest.Frame, tries)
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			<-start
			id, err := c.TrySend(typeHello, helloBody{SubscriptionID: sub, Capacity: 1})
			if err == nil {
				answers[i], err = c.TryWait(bound, func(f *wstest.Frame) bool { return f.ReplyTo == id })
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	welcomed := 0
	for i, f := range answers {
		if errs[i] != nil {
			t.Fatalf("hello %d: %v", i, errs[i])
		}
		switch {
		case f.Type == typeWelcome:
			welcomed++
		case f.Error != nil && f.Error.Code == "CAPACITY_EXCEEDED":
		default:
			t.Fatalf("hello %d answered %s", i, f)
		}
	}
	if welcomed != limit {
		t.Fatalf("%d of %d hellos welcomed, want %d", welcomed, tries, limit)
	}
	if got := n[0].count(t, `SELECT COUNT(*) FROM event_sessions WHERE application_id = ? AND closed_at IS NULL`, n[0].cred.ApplicationID); got != limit {
		t.Fatalf("%d open event sessions of the application, want %d", got, limit)
	}
}

// TestN4_MaxConnectionsPerAppConfig: events.max_connections_per_app
// defaults to 256 and must be at least 1; zero is no unlimited value.
func TestN4_MaxConnectionsPerAppConfig(t *testing.T) {
	t.Parallel()
	m := (&events.Module{}).OrbitModule().New()
	c := m.(modules.Configurer).Config().(*events.Config)
	if c.MaxConnectionsPerApp != 256 {
		t.Fatalf("default %d, want 256", c.MaxConnectionsPerApp)
	}
	for _, n := range []int{0, -1} {
		c.MaxConnectionsPerApp = n
		err := m.(modules.Validator).Validate()
		if err == nil || !strings.Contains(err.Error(), "events.max_connections_per_app: must be at least 1") {
			t.Fatalf("max_connections_per_app %d: %v, want an error naming the key", n, err)
		}
	}
}
