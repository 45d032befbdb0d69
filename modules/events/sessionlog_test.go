package events_test

import (
	"strings"
	"testing"
	"time"
)

// TestO6_SessionLogsOpenAndClose: an event session logs one line when it
// opens and one when it closes, with the entry, the session id and the
// credential id (never the token), and at the close the close code and
// what it did: deliveries sent (leases_sent), and the extensions, NACKs and
// ACKs recorded.
func TestO6_SessionLogsOpenAndClose(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cred := e.ownQueue(t)
	c := e.connect(t, cred, e.subscribe(t, cred, subscriptionParams{}), 1)
	e.results(t, cred, 1)
	d := c.deliver(t)
	wantControlReply(t, c.Request(typeExtend, d.proof()))
	wantControlReply(t, c.Request(typeNack, nackBody{proof: d.proof(), DelayMS: delayMS(0)}))
	c.acked(t, c.deliver(t).proof())
	c.Close()

	var open, closed string
	deadline := time.Now().Add(bound)
	for closed == "" && time.Now().Before(deadline) {
		for l := range strings.SplitSeq(e.srv.Logs(), "\n") {
			if !strings.Contains(l, "session_id="+c.session) {
				continue
			}
			switch {
			case strings.Contains(l, `msg="session open"`):
				open = l
			case strings.Contains(l, `msg="session close"`):
				closed = l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range []string{open, closed} {
		if l == "" || !strings.Contains(l, "entry=orbit.events.v1") || !strings.Contains(l, "credential_id="+cred.CredentialID) || strings.Contains(l, cred.Token) {
			t.Fatalf("session lines:\nopen:  %s\nclose: %s", open, closed)
		}
	}
	for _, want := range []string{"leases_sent=2", "extended=1", "nacked=1", "rejected=0", "acked=1", "close_code=", "duration="} {
		if !strings.Contains(closed, want) {
			t.Fatalf("close line without %s: %s", want, closed)
		}
	}
}
