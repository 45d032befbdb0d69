package console_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/events"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// waitTime bounds every wait in the browser and for the server.
const waitTime = 20 * time.Second

// manager holds every permission the console can use.
var manager = []string{
	"events:manage", "events:read", "events:consume",
	"tasks:submit", "tasks:read", "tasks:cancel", "tasks:review",
}

// fixture is a server, a credential with a subscription, and an SDK
// client.
type fixture struct {
	srv    *servertest.Server
	cred   servertest.Credential
	client *orbit.Client
	sub    orbit.Subscription
}

// setup starts a server whose event connections poll quickly, and a
// credential holding perms with a subscription "orders" of one attempt.
func setup(t *testing.T, perms []string) *fixture {
	t.Helper()
	srv := servertest.Start(t, servertest.ModuleConfig("events", func(c *events.Config) { c.PollInterval = 50 * time.Millisecond }))
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: manager})
	f := &fixture{srv: srv, cred: cred, client: newClient(t, srv, cred.Token)}
	res, err := f.client.CreateSubscription(context.Background(), "orders:create", orbit.CreateSubscriptionRequest{
		Name: "orders", QueueID: cred.QueueID, Types: []string{orbit.EventTypeTaskCancelled}, MaxAttempts: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.sub = res.Subscription
	if len(perms) > 0 {
		f.setPermissions(t, perms)
	}
	return f
}

// setPermissions replaces the credential's permissions.
func (f *fixture) setPermissions(t *testing.T, perms []string) {
	t.Helper()
	if _, err := f.srv.DB.Exec(`DELETE FROM credential_permissions WHERE credential_id = ?`, f.cred.CredentialID); err != nil {
		t.Fatal(err)
	}
	for _, p := range perms {
		if _, err := f.srv.DB.Exec(`INSERT INTO credential_permissions (credential_id, permission) VALUES (?, ?)`, f.cred.CredentialID, p); err != nil {
			t.Fatal(err)
		}
	}
}

func newClient(t *testing.T, srv *servertest.Server, token string) *orbit.Client {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := orbit.NewClient(srv.URL, token, orbit.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// produce appends n task.cancelled results to the credential's queue.
func (f *fixture) produce(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	store := f.srv.Instances["tasks"].(*tasks.Module).Store()
	err := store.Tx(ctx, func(tx *sql.Tx) error {
		for i := range n {
			task, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
				NamespaceID: f.cred.NamespaceID, QueueID: f.cred.QueueID, CredentialID: f.cred.CredentialID,
				Input: fmt.Appendf(nil, `{"order":"A-%d"}`, i), MaxAttempts: tasks.DefaultMaxAttempts,
			})
			if err != nil {
				return err
			}
			if _, _, err := tasks.TaskCancel(ctx, tx, task.ID, "withdrawn"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// count returns the subscription's deliveries in state.
func (f *fixture) count(t *testing.T, state string) int {
	t.Helper()
	var n int
	if err := f.srv.DB.QueryRow(`SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = ?`, f.sub.ID, state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCount waits until the subscription has n deliveries in state.
func (f *fixture) waitCount(t *testing.T, state string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTime)
	for f.count(t, state) != n {
		if time.Now().After(deadline) {
			t.Fatalf("after %s the subscription has %d %s deliveries, want %d", waitTime, f.count(t, state), state, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consume runs an SDK consumer of the subscription with handler until
// the returned stop is called (or the test ends).
func (f *fixture) consume(t *testing.T, handler orbit.EventHandler) (stop func()) {
	t.Helper()
	c, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: f.srv.URL, Token: f.cred.Token, SubscriptionID: f.sub.ID, Capacity: 4,
		Backoff: orbit.BackoffConfig{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				t.Errorf("consumer: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the consumer did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// tab is a browser tab in a browser context of its own (its own cookies).
type tab struct {
	t   *testing.T
	ctx context.Context
	srv *servertest.Server
}

func newTab(t *testing.T, srv *servertest.Server) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// The tab lives as long as the context of its first run: run it once
	// here, without the timeout of the later steps.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return &tab{t: t, ctx: ctx, srv: srv}
}

// do runs steps, failing the test after waitTime.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if _, err := runIn(b, chromedp.Steps(steps...)); err != nil {
		b.fail(what, err)
	}
}

// runIn runs one action in the tab with the timeout waitTime.
func runIn[T any](b *tab, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, waitTime)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// value runs a, failing the test on an error.
func value[T any](b *tab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	v, err := runIn(b, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

func (b *tab) fail(what string, err error) {
	b.t.Helper()
	body, _ := runIn(b, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	b.t.Fatalf("%s: %v\npage:\n%s", what, err, body)
}

// open loads a console path.
func (b *tab) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.srv.URL+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// text returns the text of the first element matching sel.
func (b *tab) text(sel string) string {
	b.t.Helper()
	return value(b, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {innerText: "<none>"}).innerText.trim()`, sel)))
}

// count returns how many elements match sel now.
func (b *tab) count(sel string) int {
	b.t.Helper()
	return value(b, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

// exists reports whether an element matches sel now.
func (b *tab) exists(sel string) bool { b.t.Helper(); return b.count(sel) > 0 }

// attr returns attribute name of the first element matching sel.
func (b *tab) attr(sel, name string) string {
	b.t.Helper()
	return value(b, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).getAttribute(%q)`, sel, name)))
}

// signIn signs in with token and waits for the queues page.
func (b *tab) signIn(token string) {
	b.t.Helper()
	b.open("/console/signin")
	b.do("sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("caption")),
	)
}

// waitText waits until the element matching sel reads want, across
// navigations (a form's answer replaces the page).
func (b *tab) waitText(sel, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === %q`, sel, want)
	deadline := time.Now().Add(waitTime)
	for {
		ok, err := runIn(b, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.fail(fmt.Sprintf("wait for %s to read %q", sel, want), fmt.Errorf("still %q (%v)", b.text(sel), err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot writes the page as docs/console/name.png when
// ORBIT_UPDATE_SCREENSHOTS=1, so that ordinary runs leave the tree alone.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	if os.Getenv("ORBIT_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	png := value(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join("..", "..", "docs", "console", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// cookie returns the tab's console session cookie, as "name=value".
func (b *tab) cookie() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTime)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.srv.URL + "/console/"}})
	if err != nil {
		b.fail("read cookies", err)
	}
	for _, c := range res.Cookies {
		if c.Name == "orbit_console" {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				b.t.Errorf("session cookie: HttpOnly %v, SameSite %s; want HttpOnly and Strict", c.HTTPOnly, c.SameSite)
			}
			return c.Name + "=" + c.Value
		}
	}
	b.t.Fatal("no console session cookie")
	return ""
}

// csrf returns the CSRF token of the tab's current page.
func (b *tab) csrf() string {
	b.t.Helper()
	return b.attr("input[name=csrf]", "value")
}

// reply is a console answer to a request sent from Go.
type reply struct {
	status   int
	location string
	body     string
}

// send sends a console request with cookie (none when ""), not following
// redirects.
func send(t *testing.T, srv *servertest.Server, method, path, cookie string, form url.Values) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	return reply{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b)}
}
