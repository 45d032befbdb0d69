package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/events"
)

// TestE14_Heartbeat: events.ping is answered with ack {server_time,
// enabled} after the credential and the subscription's scope have been
// checked again; a revoked credential, a lost permission or a lost queue
// grant gets its error and the close. A connection whose client sends no
// valid frame for idle_timeout is closed, however many deliveries it gets.
func TestE14_Heartbeat(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("PingReply", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		before := time.Now().Add(-time.Millisecond)
		ping := c.NewFrame(typePing, struct{}{})
		c.SendFrame(ping)
		reply := c.Reply(ping.MessageID)
		r := wantPingReply(t, reply)
		wantMembers(t, "ping ack body", reply.Body, "server_time", "enabled")
		if st := parseTime(t, r.ServerTime); !r.Enabled || st.Before(before) || st.After(time.Now()) {
			t.Fatalf("ping ack %+v", r)
		}
		if reply.SessionID != c.session {
			t.Fatalf("ping ack envelope: %s", reply)
		}
		doctest.Check(t, docPath, "events-ping", ping.Raw)
		doctest.Check(t, docPath, "events-ping-reply", reply.Raw)
	})
	t.Run("PingWithBody", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		c := e.connect(t, cred, e.subscribe(t, cred, subscriptionParams{}), 1)
		f := c.NewFrame(typePing, map[string]any{"x": 1})
		c.SendInvalid(f)
		wantError(t, c.Reply(f.MessageID), "INVALID_ARGUMENT")
		wantPingReply(t, c.ping(t))
	})

	// Claims check the credential too (TestE14_EveryClaimChecksTheGrant);
	// on this server they run only after the welcome and when results are
	// signalled, so that once settled the ping is what finds the change.
	pingOnly := setup(t, eventsConfig(func(c *events.Config) { c.PollInterval = time.Hour }))

	// closedAfterPing checks that a ping is answered with code, with
	// reply_to and session_id, and that the connection then closes.
	closedAfterPing := func(t *testing.T, c *consumer, code string) {
		t.Helper()
		ping := c.NewFrame(typePing, struct{}{})
		c.SendFrame(ping)
		f := c.Reply(ping.MessageID)
		wantError(t, f, code)
		if f.SessionID != c.session {
			t.Fatalf("error without the session: %s", f)
		}
		c.ExpectClose(closePolicyViolation)
	}
	t.Run("RevokedCredential", func(t *testing.T) {
		t.Parallel()
		cred := pingOnly.ownQueue(t)
		c := pingOnly.connect(t, cred, pingOnly.subscribe(t, cred, subscriptionParams{}), 1)
		c.settle()
		if err := admin.NewStore(pingOnly.srv.DB).CredentialRevoke(context.Background(), cred.CredentialID, "test"); err != nil {
			t.Fatal(err)
		}
		closedAfterPing(t, c, "UNAUTHENTICATED")
	})
	t.Run("LostConsumePermission", func(t *testing.T) {
		t.Parallel()
		cred := pingOnly.ownQueue(t)
		c := pingOnly.connect(t, cred, pingOnly.subscribe(t, cred, subscriptionParams{}), 1)
		c.settle()
		if _, err := pingOnly.srv.DB.Exec(`DELETE FROM credential_permissions WHERE credential_id = ? AND permission = ?`,
			cred.CredentialID, auth.PermEventsConsume); err != nil {
			t.Fatal(err)
		}
		closedAfterPing(t, c, "PERMISSION_DENIED")
	})
	t.Run("LostQueueGrant", func(t *testing.T) {
		t.Parallel()
		cred := pingOnly.ownQueue(t)
		c := pingOnly.connect(t, cred, pingOnly.subscribe(t, cred, subscriptionParams{}), 1)
		c.settle()
		if _, err := pingOnly.srv.DB.Exec(`DELETE FROM credential_queue_grants WHERE credential_id = ?`, cred.CredentialID); err != nil {
			t.Fatal(err)
		}
		closedAfterPing(t, c, "NOT_FOUND")
	})

	t.Run("WithoutPings", func(t *testing.T) {
		t.Parallel()
		// The client decides when to ping; the server checks again on
		// its own every heartbeat interval, so a revoked credential or a
		// lost grant ends the connection even if the client only ACKs.
		const heartbeat = 200 * time.Millisecond
		e := setup(t, eventsConfig(func(c *events.Config) { c.HeartbeatInterval = heartbeat }))
		checks := []struct {
			name   string
			code   string
			revoke func(t *testing.T, credentialID string)
		}{
			{"Revoked", "UNAUTHENTICATED", func(t *testing.T, id string) {
				if err := admin.NewStore(e.srv.DB).CredentialRevoke(context.Background(), id, "test"); err != nil {
					t.Fatal(err)
				}
			}},
			{"LostQueueGrant", "NOT_FOUND", func(t *testing.T, id string) {
				if _, err := e.srv.DB.Exec(`DELETE FROM credential_queue_grants WHERE credential_id = ?`, id); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tt := range checks {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				cred := e.ownQueue(t)
				sub := e.subscribe(t, cred, subscriptionParams{})
				c := e.connect(t, cred, sub, 1)
				e.result(t, cred)
				c.acked(t, c.deliver(t).proof())
				tt.revoke(t, cred.CredentialID)
				f := c.NextType(typeError)
				wantError(t, f, tt.code)
				if f.ReplyTo != "" || f.SessionID != c.session {
					t.Fatalf("background check error envelope: %s", f)
				}
				c.ExpectClose(closePolicyViolation)
			})
		}
	})

	t.Run("IdleTimeout", func(t *testing.T) {
		t.Parallel()
		const (
			idle      = 600 * time.Millisecond
			heartbeat = 150 * time.Millisecond
		)
		e := setup(t, eventsConfig(func(c *events.Config) {
			c.IdleTimeout = idle
			c.HeartbeatInterval = heartbeat
		}))
		sub := e.subscribe(t, e.cred, subscriptionParams{})

		// Pings every heartbeat interval keep the connection open well
		// past the idle timeout.
		alive := e.connect(t, e.cred, sub, 32)
		if alive.body.HeartbeatIntervalMS != heartbeat.Milliseconds() {
			t.Fatalf("heartbeat_interval_ms %d, want %d", alive.body.HeartbeatIntervalMS, heartbeat.Milliseconds())
		}
		tick := time.NewTicker(heartbeat)
		defer tick.Stop()
		for end := time.Now().Add(3 * idle); time.Now().Before(end); <-tick.C {
			wantPingReply(t, alive.ping(t))
		}

		// Deliveries are not a client heartbeat: a silent client is
		// closed while it receives them.
		silent := e.connect(t, e.cred, e.subscribe(t, e.cred, subscriptionParams{}), 32)
		start := time.Now()
		e.result(t, e.cred)
		silent.deliver(t)
		silent.ExpectClose(closePolicyViolation)
		if waited := time.Since(start); waited < idle-100*time.Millisecond {
			t.Fatalf("closed after %s, before the idle timeout of %s", waited, idle)
		}
	})
}
