package workers_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/workers"
)

// closeTryAgainLater follows a refusal for capacity.
const closeTryAgainLater = 1013

// nodes starts n servers on one database, each with
// workers.max_connections_per_app set to perApp, as n nodes of one
// deployment; the first node's credential e.cred serves them all.
func nodes(t *testing.T, n, perApp int) []*env {
	t.Helper()
	pool := testdb.New(t)
	out := make([]*env, n)
	for i := range out {
		srv := servertest.StartOn(t, pool, workersConfig(func(c *workers.Config) {
			c.PollInterval = pollInterval
			c.MaxConnectionsPerApp = perApp
		}))
		out[i] = &env{srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + connectPath}
	}
	out[0].cred = out[0].credential(t, "q")
	for _, e := range out[1:] {
		e.cred = out[0].cred
	}
	return out
}

// helloAnswer dials e with cred, says hello on its queue and returns the
// connection and the answer.
func (e *env) helloAnswer(t *testing.T, cred servertest.Credential) (*wstest.Client, *wstest.Frame) {
	t.Helper()
	c := e.dial(t, cred)
	hello := c.NewFrame(typeHello, helloBody{QueueID: cred.QueueID, Capacity: 1})
	c.SendFrame(hello)
	return c, c.Reply(hello.MessageID)
}

// wantAppLimit checks that a hello on e is refused because cred's
// application is at its limit: CAPACITY_EXCEEDED naming the key, then the
// close 1013.
func (e *env) wantAppLimit(t *testing.T, cred servertest.Credential) {
	t.Helper()
	c, answer := e.helloAnswer(t, cred)
	wantError(t, answer, "CAPACITY_EXCEEDED")
	if !strings.Contains(answer.Error.Message, "workers.max_connections_per_app") {
		t.Fatalf("refusal does not name workers.max_connections_per_app: %s", answer)
	}
	c.ExpectClose(closeTryAgainLater)
}

// TestN4_PerAppConnectionLimitHoldsAcrossNodes: with
// workers.max_connections_per_app 2 on two nodes of one database, an
// application's third worker connection is refused after its hello on
// either node, whichever credential of the application it uses, while
// another application connects; closing one connection frees its slot.
func TestN4_PerAppConnectionLimitHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	n := nodes(t, 2, 2)
	a, b := n[0], n[1]
	first := a.connect(t, a.cred, 1)
	b.connect(t, a.cred, 1)

	a.wantAppLimit(t, a.cred)
	b.wantAppLimit(t, a.cred)
	// Another credential of the same application shares its limit.
	b.wantAppLimit(t, a.credential(t, "q2"))
	if got := a.count(t, `SELECT COUNT(*) FROM worker_sessions WHERE closed_at IS NULL`); got != 2 {
		t.Fatalf("%d open worker sessions, want 2: refused hellos record none", got)
	}

	// Another application is not bound by this one's connections.
	other := a.srv.Credential(t, servertest.CredentialParams{Application: "other", Permissions: workPermissions})
	b.connect(t, other, 1)
	a.connect(t, other, 1)

	// Closing a connection on one node frees a slot on the other.
	first.Close()
	eventually(t, "a connection on b after one on a closed", func() bool {
		c, answer := b.helloAnswer(t, a.cred)
		if answer.Type == typeWelcome {
			return true
		}
		wantError(t, answer, "CAPACITY_EXCEEDED")
		c.ExpectClose(closeTryAgainLater)
		return false
	})
	a.wantAppLimit(t, a.cred)
}

// TestN4_ConcurrentConnectsNeverExceedTheLimit: many hellos of one
// application sent at once to two nodes are admitted up to
// workers.max_connections_per_app and no further; the others are refused
// with CAPACITY_EXCEEDED.
func TestN4_ConcurrentConnectsNeverExceedTheLimit(t *testing.T) {
	t.Parallel()
	const limit, tries = 3, 16
	n := nodes(t, 2, limit)
	cred := n[0].cred
	clients := make([]*wstest.Client, tries)
	for i := range clients {
		clients[i] = n[i%2].dial(t, cred)
	}
	start := make(chan struct{})
	answers := make([]*wstest.Frame, tries)
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			<-start
			id, err := c.TrySend(typeHello, helloBody{QueueID: cred.QueueID, Capacity: 1})
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
	if got := n[0].count(t, `SELECT COUNT(*) FROM worker_sessions WHERE application_id = ? AND closed_at IS NULL`, cred.ApplicationID); got != limit {
		t.Fatalf("%d open worker sessions of the application, want %d", got, limit)
	}
}

// TestN4_MaxConnectionsPerAppConfig: workers.max_connections_per_app
// defaults to 256 and must be at least 1; zero is no unlimited value.
func TestN4_MaxConnectionsPerAppConfig(t *testing.T) {
	t.Parallel()
	m := (&workers.Module{}).OrbitModule().New()
	c := m.(modules.Configurer).Config().(*workers.Config)
	if c.MaxConnectionsPerApp != 256 {
		t.Fatalf("default %d, want 256", c.MaxConnectionsPerApp)
	}
	for _, n := range []int{0, -1} {
		c.MaxConnectionsPerApp = n
		err := m.(modules.Validator).Validate()
		if err == nil || !strings.Contains(err.Error(), "workers.max_connections_per_app: must be at least 1") {
			t.Fatalf("max_connections_per_app %d: %v, want an error naming the key", n, err)
		}
	}
}
