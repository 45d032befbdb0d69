package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// deadLetters makes n dead letters: n results, each rejected by a
// consumer (the subscription allows one attempt).
func (f *fixture) deadLetters(t *testing.T, n int) {
	t.Helper()
	f.produce(t, n)
	stop := f.consume(t, func(context.Context, *orbit.Delivery) error { return orbit.Reject("downstream down") })
	f.waitCount(t, "EXPIRED", n)
	stop()
}

// TestO10_SignInWrongTokenAndRevocation: a wrong token is refused on the
// sign-in page and no session cookie is set; the right one signs in to
// the queues page with an HttpOnly, SameSite=Strict cookie; revoking the
// credential ends the session at the next request.
func TestO10_SignInWrongTokenAndRevocation(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	b := newTab(t, f.srv)

	b.open("/console/queues")
	if !b.exists("#token") {
		t.Fatal("/console/queues without a session does not show the sign-in form")
	}
	b.do("wrong token",
		chromedp.SendKeys(chromedp.CSS("#token"), "orbit_wrong-token"),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#signin-error")),
	)
	if got := b.text("#signin-error"); !strings.Contains(got, "not a valid credential") {
		t.Errorf("wrong token: %q", got)
	}
	b.screenshot("signin")
	var n int
	if err := f.srv.DB.QueryRow(`SELECT COUNT(*) FROM console_sessions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after a wrong token: %d sessions (%v), want 0", n, err)
	}

	b.signIn(f.cred.Token)
	if got := b.text("main"); !strings.Contains(got, f.cred.QueueID) {
		t.Errorf("queues page does not list the credential's queue %s:\n%s", f.cred.QueueID, got)
	}
	cookie := b.cookie()
	var digest []byte
	if err := f.srv.DB.QueryRow(`SELECT secret_digest FROM console_sessions WHERE credential_id = ?`, f.cred.CredentialID).Scan(&digest); err != nil {
		t.Fatal(err)
	}
	if secret := cookie[strings.Index(cookie, ".")+1:]; strings.Contains(string(digest), secret) || len(digest) != 32 {
		t.Error("the session secret is stored as it is, not as its digest")
	}

	if _, err := f.srv.DB.Exec(`UPDATE credentials SET revoked_at = UTC_TIMESTAMP(6) WHERE id = ?`, f.cred.CredentialID); err != nil {
		t.Fatal(err)
	}
	if r := send(t, f.srv, http.MethodGet, "/console/queues", cookie, nil); r.status != http.StatusSeeOther || r.location != "/console/signin" {
		t.Errorf("a revoked credential's session: %d to %q, want 303 to the sign-in page", r.status, r.location)
	}
	if err := f.srv.DB.QueryRow(`SELECT COUNT(*) FROM console_sessions WHERE credential_id = ?`, f.cred.CredentialID).Scan(&n); err != nil || n != 0 {
		t.Errorf("a revoked credential keeps %d sessions (%v)", n, err)
	}
}

// TestO10_BulkRetryDeliveredToConsumer: the subscription page shows the
// dead letters; a dry run counts them, the confirmation retries them, and
// a running SDK consumer ACKs them, which the page shows without a reload.
func TestO10_BulkRetryDeliveredToConsumer(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.deadLetters(t, 3)
	acked := make(chan string, 16)
	f.consume(t, func(_ context.Context, d *orbit.Delivery) error {
		acked <- d.ID
		return nil
	})

	b := newTab(t, f.srv)
	b.signIn(f.cred.Token)
	b.screenshot("queues")
	b.open("/console/subscriptions/" + f.sub.ID)
	if got := b.text("#dead-letter-count"); got != "3" {
		t.Fatalf("dead letters shown: %q, want 3", got)
	}
	if rows := b.count("#dead-letters tbody tr a"); rows != 3 {
		t.Fatalf("dead-letter table has %d rows, want 3", rows)
	}
	b.screenshot("subscription")

	b.do("dry run",
		chromedp.SendKeys(chromedp.CSS("#retry-reason"), "downstream fixed"),
		chromedp.Click(chromedp.CSS("#retry-form button")),
		chromedp.WaitVisible(chromedp.CSS("#dry-run-count")),
	)
	if got := b.text("#dry-run-count"); !strings.Contains(got, "3 deliveries match") {
		t.Fatalf("dry run: %q", got)
	}
	if n := f.count(t, "EXPIRED"); n != 3 {
		t.Fatalf("the dry run changed something: %d EXPIRED", n)
	}
	b.screenshot("confirm")
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-form button")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	f.waitCount(t, "ACKED", 3)
	// The page refreshes its figures by itself.
	b.waitText("#dead-letter-count", "0")

	b.open("/console/subscriptions/" + f.sub.ID + "/deliveries?state=ACKED")
	if rows := b.count("tbody tr a"); rows != 3 {
		t.Errorf("ACKED deliveries listed: %d, want 3", rows)
	}
	b.screenshot("deliveries")
	b.open(b.attr("tbody tr a", "href"))
	if got := b.text("#delivery-state"); got != "ACKED" {
		t.Errorf("delivery page state %q", got)
	}
	b.screenshot("delivery")
	b.open(b.attr(`main a[href^="/console/tasks/"]`, "href"))
	if got := b.text("main"); !strings.Contains(got, "task.cancelled") || !strings.Contains(got, "CANCELLED") {
		t.Errorf("task page lacks its event:\n%s", got)
	}
	b.screenshot("task")
}

// TestO10_PauseResumeConcurrentChange: a pause from a page whose revision
// is stale (the subscription was paused elsewhere meanwhile) is refused
// with the API's STATE_CONFLICT and changes nothing; resume from the
// fresh page works.
func TestO10_PauseResumeConcurrentChange(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	b := newTab(t, f.srv)
	b.signIn(f.cred.Token)
	b.open("/console/subscriptions/" + f.sub.ID)
	if !b.exists("#pause-form") {
		t.Fatal("no pause form for a credential with events:manage")
	}
	ctx := context.Background()
	if _, err := f.client.ConfigureSubscription(ctx, f.sub.ID, "elsewhere:pause", orbit.ConfigureSubscriptionRequest{
		ExpectedRevision: 1, Enabled: false, Reason: "paused elsewhere",
	}); err != nil {
		t.Fatal(err)
	}
	b.do("stale pause", chromedp.Click(chromedp.CSS("#pause-form button")))
	b.waitText("h1", "Changed meanwhile")
	if got := b.text("main"); !strings.Contains(got, "Changed meanwhile") || !strings.Contains(got, "STATE_CONFLICT") {
		t.Errorf("stale pause answered:\n%s", got)
	}
	sub, err := f.client.GetSubscription(ctx, f.sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Revision != 2 || sub.Enabled {
		t.Fatalf("after the refused pause: revision %d, enabled %v; want 2 and paused", sub.Revision, sub.Enabled)
	}

	b.open("/console/subscriptions/" + f.sub.ID)
	b.do("resume", chromedp.Click(chromedp.CSS("#resume-form button")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if sub, err = f.client.GetSubscription(ctx, f.sub.ID); err != nil || !sub.Enabled || sub.Revision != 3 {
		t.Fatalf("after resume: %+v, %v", sub, err)
	}
	b.do("pause", chromedp.Click(chromedp.CSS("#pause-form button")))
	b.waitText(".notice", "The subscription is paused.")
	if got := b.text("[data-field=state]"); got != "paused" {
		t.Errorf("state after pause: %q", got)
	}
}

// TestO10_ReadOnlyCredentialCannotWrite: a credential without
// events:manage sees the subscription and its dead letters but no write
// form, and its forged POSTs are refused: without a CSRF token, with the
// CSRF token of another session, and even with its own token (by the
// API's permission check). Nothing changes.
func TestO10_ReadOnlyCredentialCannotWrite(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.deadLetters(t, 1)
	other := newTab(t, f.srv)
	other.signIn(f.cred.Token)
	other.open("/console/subscriptions/" + f.sub.ID)
	stolen := other.csrf()

	f.setPermissions(t, []string{"events:read", "tasks:read"})
	b := newTab(t, f.srv)
	b.signIn(f.cred.Token)
	b.open("/console/subscriptions/" + f.sub.ID)
	if got := b.text("#dead-letter-count"); got != "1" {
		t.Errorf("read-only dead letters: %q", got)
	}
	if n := b.count("main button"); n != 0 {
		t.Errorf("read-only page has %d buttons", n)
	}
	for _, sel := range []string{"#pause-form", "#resume-form", "#retry-form", "#replay-form", "#skip-form"} {
		if b.exists(sel) {
			t.Errorf("read-only page shows %s", sel)
		}
	}
	b.screenshot("subscription-read-only")
	cookie, own := b.cookie(), b.csrf()

	pause := "/console/subscriptions/" + f.sub.ID + "/pause"
	retry := "/console/subscriptions/" + f.sub.ID + "/retry"
	for name, c := range map[string]struct {
		path  string
		form  url.Values
		codes []int
	}{
		"PauseWithoutCSRF":     {pause, url.Values{"expected_revision": {"1"}}, []int{http.StatusForbidden}},
		"PauseWithStolenCSRF":  {pause, url.Values{"expected_revision": {"1"}, "csrf": {stolen}}, []int{http.StatusForbidden}},
		"PauseWithOwnCSRF":     {pause, url.Values{"expected_revision": {"1"}, "csrf": {own}}, []int{http.StatusForbidden}},
		"RetryWithStolenCSRF":  {retry, url.Values{"step": {"confirm"}, "expected_count": {"1"}, "additional_attempts": {"1"}, "reason": {"x"}, "csrf": {stolen}}, []int{http.StatusForbidden}},
		"RetryWithOwnCSRF":     {retry, url.Values{"step": {"confirm"}, "expected_count": {"1"}, "additional_attempts": {"1"}, "reason": {"x"}, "csrf": {own}}, []int{http.StatusForbidden}},
		"RetryWithoutASession": {retry, url.Values{"step": {"confirm"}, "expected_count": {"1"}, "additional_attempts": {"1"}, "reason": {"x"}, "csrf": {own}}, []int{http.StatusForbidden}},
	} {
		cookieSent := cookie
		if name == "RetryWithoutASession" {
			cookieSent = ""
		}
		r := send(t, f.srv, http.MethodPost, c.path, cookieSent, c.form)
		if r.status != c.codes[0] {
			t.Errorf("%s: %d %s, want %d", name, r.status, r.body, c.codes[0])
		}
		if strings.HasSuffix(name, "OwnCSRF") && !strings.Contains(r.body, "PERMISSION_DENIED") {
			t.Errorf("%s: refused, but not by the API's permission check: %s", name, r.body)
		}
	}
	sub, err := f.client.GetSubscription(context.Background(), f.sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Revision != 1 || !sub.Enabled || f.count(t, "EXPIRED") != 1 {
		t.Errorf("the forged POSTs changed the subscription: revision %d, enabled %v, %d EXPIRED", sub.Revision, sub.Enabled, f.count(t, "EXPIRED"))
	}
}

// TestO10_AnotherNamespaceIs404: a credential of another namespace that
// names the subscription (or its delivery) in a URL gets the 404 page, as
// for one that does not exist.
func TestO10_AnotherNamespaceIs404(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.deadLetters(t, 1)
	var delivery string
	if err := f.srv.DB.QueryRow(`SELECT id FROM event_deliveries WHERE subscription_id = ?`, f.sub.ID).Scan(&delivery); err != nil {
		t.Fatal(err)
	}
	stranger := f.srv.Credential(t, servertest.CredentialParams{Namespace: "other-ns", Permissions: manager})
	b := newTab(t, f.srv)
	b.signIn(stranger.Token)
	cookie := b.cookie()
	for _, path := range []string{
		"/console/subscriptions/" + f.sub.ID,
		"/console/subscriptions/" + f.sub.ID + "/deliveries",
		"/console/subscriptions/" + f.sub.ID + "/deliveries/" + delivery,
		"/console/live/subscriptions/" + f.sub.ID,
	} {
		if r := send(t, f.srv, http.MethodGet, path, cookie, nil); r.status != http.StatusNotFound || strings.Contains(r.body, "orders") {
			t.Errorf("%s as another namespace: %d, want 404 without the subscription's name:\n%s", path, r.status, r.body)
		}
	}
	b.open("/console/subscriptions/" + f.sub.ID)
	if got := b.text("h1"); got != "Not found" {
		t.Errorf("the page of another namespace's subscription is titled %q, want Not found", got)
	}
}
