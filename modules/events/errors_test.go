package events_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// TestE15_ErrorFrames: error frames have no body, reply_to when they answer
// a request and session_id once it is bound. A bad command is answered with
// INVALID_ARGUMENT and the connection stays; an invalid envelope closes it
// with 1008; a history gap is reported as EVENT_HISTORY_EXPIRED and closes
// it, without ever jumping ahead.
func TestE15_ErrorFrames(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// invalidCommand sends f, which the schema refuses too unless valid is
	// set, and checks that it is answered with INVALID_ARGUMENT and that
	// the connection stays.
	invalidCommand := func(t *testing.T, c *consumer, f *wstest.Frame, valid bool) {
		t.Helper()
		if valid {
			c.SendFrame(f)
		} else {
			c.SendInvalid(f)
		}
		answer := c.Reply(f.MessageID)
		wantError(t, answer, "INVALID_ARGUMENT")
		if answer.SessionID != c.session || answer.ReplyTo != f.MessageID {
			t.Fatalf("error envelope: %s", answer)
		}
		wantPingReply(t, c.ping(t))
	}

	t.Run("UnknownType", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		c := e.connect(t, cred, e.subscribe(t, cred, subscriptionParams{}), 1)
		f := c.NewFrame("events.subscribe", struct{}{})
		invalidCommand(t, c, f, false)
	})
	t.Run("SecondHello", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		c := e.connect(t, cred, sub, 1)
		invalidCommand(t, c, c.NewFrame(typeHello, helloBody{SubscriptionID: sub, Capacity: 1}), false)
	})
	t.Run("BadAckBody", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		c := e.connect(t, cred, e.subscribe(t, cred, subscriptionParams{}), 1)
		id, secret := wstest.NewID(), otherSecret("")
		invalid := []any{
			map[string]any{"delivery_id": id, "epoch": "01", "lease_secret": secret},
			map[string]any{"delivery_id": id, "epoch": 1, "lease_secret": secret},
			map[string]any{"delivery_id": id, "epoch": "1"},
			map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": secret, "extra": true},
			map[string]any{"delivery_id": strings.ToUpper(id), "epoch": "1", "lease_secret": secret},
			map[string]any{"delivery_id": id, "epoch": "1", "lease_secret": secret + "="},
			nil,
		}
		for _, body := range invalid {
			invalidCommand(t, c, c.NewFrame(typeAck, body), false)
		}
		// What the schema cannot say, the server still refuses (E-18):
		// a uint64 out of range and a secret whose unused bits are set.
		valid := []any{
			proof{DeliveryID: id, Epoch: "18446744073709551616", LeaseSecret: secret},
			proof{DeliveryID: id, Epoch: "1", LeaseSecret: secret[:42] + "B"},
		}
		for _, body := range valid {
			invalidCommand(t, c, c.NewFrame(typeAck, body), true)
		}
	})

	t.Run("InvalidEnvelope", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		// Each case is a ping of the connection's session changed in one
		// place.
		cases := []struct {
			name string
			raw  func(session string) string
		}{
			{"ProtocolVersion2", func(s string) string {
				return `{"protocol_version":"2","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","body":{}}`
			}},
			{"UnknownMember", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","body":{},"extra":1}`
			}},
			{"MissingMessageID", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","session_id":"` + s + `","body":{}}`
			}},
			{"MessageIDNotHex", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + strings.Repeat("z", 32) + `","session_id":"` + s + `","body":{}}`
			}},
			{"BodyArray", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","body":[]}`
			}},
			{"ErrorMember", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","error":{"code":"INTERNAL","message":"x"}}`
			}},
			{"NullMember", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","reply_to":null,"body":{}}`
			}},
			{"DuplicateKey", func(s string) string {
				return `{"protocol_version":"1","type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","body":{},"body":{}}`
			}},
			{"CaseVariant", func(s string) string {
				return `{"protocol_version":"1","Type":"events.ping","message_id":"` + wstest.NewID() + `","session_id":"` + s + `","body":{}}`
			}},
			{"NotJSON", func(string) string { return `{"protocol_version":` }},
		}
		for _, tt := range cases {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c := e.connect(t, cred, sub, 1)
				raw := tt.raw(c.session)
				if tt.name != "DuplicateKey" && schema(t).ValidateClient([]byte(raw)) == nil {
					t.Fatalf("the schema accepts %s", raw)
				}
				c.SendRaw(websocket.TextMessage, []byte(raw))
				if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
					t.Fatalf("frames before the close: %s", rest[0])
				}
			})
		}
		t.Run("Binary", func(t *testing.T) {
			t.Parallel()
			c := e.connect(t, cred, sub, 1)
			ping, _ := json.Marshal(c.NewFrame(typePing, struct{}{}))
			c.SendRaw(websocket.BinaryMessage, ping)
			c.ExpectClose(closePolicyViolation)
		})
	})

	t.Run("EventHistoryExpired", func(t *testing.T) {
		t.Parallel()
		cred := e.ownQueue(t)
		sub := e.subscribe(t, cred, subscriptionParams{})
		// Paused, the subscription does not take the results in; the
		// older two are then purged by retention, the newest stays.
		e.configure(t, cred, sub, false)
		for range 3 {
			e.result(t, cred)
		}
		ctx := context.Background()
		if _, err := e.srv.DB.ExecContext(ctx, `UPDATE result_events SET occurred_at = ? WHERE queue_id = ? AND sequence <= 2`,
			time.Now().Add(-30*24*time.Hour), cred.QueueID); err != nil {
			t.Fatal(err)
		}
		n, err := tasks.EventPurge(ctx, e.srv.DB, &tasks.EventPurgeParams{QueueID: cred.QueueID, Cutoff: time.Now().Add(-24 * time.Hour), Batch: 100, Holds: []tasks.RetentionHold{e.srv.Instances["subscriptions"].(*subscriptions.Module)}})
		if err != nil || n != 2 {
			t.Fatalf("purged %d events: %v", n, err)
		}
		e.configure(t, cred, sub, true)

		for range 2 {
			// Every connection gets the report, then the close.
			c := e.connect(t, cred, sub, 1)
			f := c.NextType(typeError)
			wantError(t, f, "EVENT_HISTORY_EXPIRED")
			if f.ReplyTo != "" || f.SessionID != c.session {
				t.Fatalf("history error envelope: %s", f)
			}
			if rest := c.ExpectClose(closePolicyViolation); len(rest) != 0 {
				t.Fatalf("frames after the error: %s", rest[0])
			}
		}
		if v := e.subscription(t, cred, sub); v.CursorSequence != "0" || v.PendingCount != 0 {
			t.Fatalf("subscription after the gap: %+v", v)
		}
		if n := e.count(t, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ?`, sub); n != 0 {
			t.Fatalf("%d deliveries past the gap: the subscription jumped ahead", n)
		}
	})
}
