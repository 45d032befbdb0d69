package events_test

import (
	"testing"
	"time"

	"github.com/orbitrun/orbit/modules/events"
)

// TestE15_ClaimFailureIsUnavailableAndCloses: the first claim that fails on
// the database is reported with UNAVAILABLE, without reply_to and with the
// session id, and closes the connection with 1011 (seed 001 §7). A new
// connection, once the database answers again, is served as usual.
func TestE15_ClaimFailureIsUnavailableAndCloses(t *testing.T) {
	t.Parallel()
	// Only a signal makes the dispatcher claim, so the test knows how many
	// claims fail: at most the connection's first and the signalled one.
	e := setup(t, eventsConfig(func(c *events.Config) { c.PollInterval = time.Hour }))
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)

	// Without the sessions table, the claim's transaction fails.
	e.srv.RenameTable(t, "event_sessions", "event_sessions_away")
	// A result is materialised, and the subscriptions module signals the
	// delivery claimable: the connection claims once.
	e.result(t, e.cred)
	f := c.NextType(typeError)
	wantError(t, f, "UNAVAILABLE")
	if f.ReplyTo != "" || f.SessionID != c.session {
		t.Fatalf("error envelope: %s", f)
	}
	if rest := c.ExpectClose(closeInternalError); len(rest) != 0 {
		t.Fatalf("frames after the error: %v", rest)
	}
	e.srv.RenameTable(t, "event_sessions_away", "event_sessions")

	later := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := later.deliver(t)
	if r := later.acked(t, d.proof()); r.Deduplicated {
		t.Fatalf("ACK on the new connection: %+v", r)
	}
}
