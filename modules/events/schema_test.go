package events_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// clientTypes and serverTypes are the frame types of each direction,
// sorted.
var (
	clientTypes = []string{typeAck, typeHello, typePing}
	serverTypes = []string{typeReply, typeError, typeDeliver, typeWelcome}
)

// seedExamples are the JSON examples of seed 001 §5–7, verbatim.
var seedExamples = map[string]string{
	typeHello: `{
  "protocol_version": "1",
  "type": "events.hello",
  "message_id": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "body": {"subscription_id": "22222222222222222222222222222222", "capacity": 1}
}`,
	typeWelcome: `{
  "protocol_version": "1",
  "type": "events.welcome",
  "message_id": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
  "reply_to": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "session_id": "44444444444444444444444444444444",
  "body": {
    "session_id": "44444444444444444444444444444444",
    "subscription_id": "22222222222222222222222222222222",
    "capacity": 1,
    "lease_duration_ms": 30000,
    "heartbeat_interval_ms": 15000,
    "server_time": "2026-09-17T10:00:00Z",
    "enabled": true
  }
}`,
	typeDeliver: `{
  "protocol_version": "1",
  "type": "event.deliver",
  "message_id": "cccccccccccccccccccccccccccccccc",
  "session_id": "44444444444444444444444444444444",
  "body": {
    "delivery": {
      "created_at": "2026-09-17T10:00:00Z",
      "id": "33333333333333333333333333333333",
      "subscription_id": "22222222222222222222222222222222",
      "event_id": "55555555555555555555555555555555",
      "sequence": "13",
      "revision": "2",
      "state": "LEASED",
      "available_at": "2026-09-17T10:00:00Z",
      "lease_epoch": "1",
      "lease_until": "2026-09-17T10:00:30Z",
      "attempts": 1,
      "attempt_budget": 20
    },
    "event": {
      "id": "55555555555555555555555555555555",
      "sequence": "13",
      "type": "task.cancelled",
      "aggregate_kind": "task",
      "aggregate_id": "66666666666666666666666666666666",
      "aggregate_revision": "2",
      "occurred_at": "2026-09-17T10:00:00Z",
      "details": {"state": "CANCELLED", "reason": "CANCEL_REQUESTED"},
      "snapshot": {
        "schema_version": 1,
        "task_id": "66666666666666666666666666666666",
        "queue_id": "11111111111111111111111111111111",
        "state": "CANCELLED",
        "revision": "2",
        "effect_uncertain": false
      }
    },
    "lease_secret": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
  }
}`,
	typeAck: `{
  "protocol_version": "1",
  "type": "event.ack",
  "message_id": "dddddddddddddddddddddddddddddddd",
  "session_id": "44444444444444444444444444444444",
  "body": {
    "delivery_id": "33333333333333333333333333333333",
    "epoch": "1",
    "lease_secret": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
  }
}`,
	typeReply: `{
  "protocol_version": "1",
  "type": "ack",
  "message_id": "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
  "reply_to": "dddddddddddddddddddddddddddddddd",
  "session_id": "44444444444444444444444444444444",
  "body": {
    "delivery_id": "33333333333333333333333333333333",
    "event_id": "55555555555555555555555555555555",
    "epoch": "1",
    "acknowledged_at": "2026-09-17T10:00:01Z",
    "deduplicated": false
  }
}`,
	typePing: `{
  "protocol_version": "1",
  "type": "events.ping",
  "message_id": "ffffffffffffffffffffffffffffffff",
  "session_id": "44444444444444444444444444444444",
  "body": {}
}`,
}

// TestE18_FramesMatchSchema: every client of this package validates each
// frame it sends or receives against docs/api/events.schema.json and fails
// its test on a mismatch. This test runs one session that produces every
// frame type, checks that all were validated and that they have the seed
// examples' members exactly, and checks that the schema refuses what the
// protocol refuses and accepts the seed's and events.md's examples.
func TestE18_FramesMatchSchema(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := schema(t)
	sub := e.subscribe(t, e.cred, subscriptionParams{})
	c := e.connect(t, e.cred, sub, 1)
	e.result(t, e.cred)
	d := c.deliver(t)
	wantPingReply(t, c.ping(t))
	wrong := d.proof()
	wrong.LeaseSecret = otherSecret(wrong.LeaseSecret)
	wantError(t, c.ack(t, wrong), "DELIVERY_LEASE_LOST")
	c.acked(t, d.proof())

	records := c.Records()
	t.Run("EveryFrameValidated", func(t *testing.T) {
		seen := map[wstest.Direction][]string{}
		for _, r := range records {
			if !r.Checked || r.Expect != wstest.Valid || r.Err != nil {
				t.Errorf("%s frame not validated or invalid (%v): %s", r.Direction, r.Err, r.Raw)
			}
			if !slices.Contains(seen[r.Direction], r.Type) {
				seen[r.Direction] = append(seen[r.Direction], r.Type)
			}
		}
		sort.Strings(seen[wstest.Sent])
		sort.Strings(seen[wstest.Received])
		if !slices.Equal(seen[wstest.Sent], clientTypes) {
			t.Errorf("client frame types %v, want %v", seen[wstest.Sent], clientTypes)
		}
		if !slices.Equal(seen[wstest.Received], serverTypes) {
			t.Errorf("server frame types %v, want %v", seen[wstest.Received], serverTypes)
		}
	})

	// The session's frames by kind; the ack of the ping and that of
	// event.ack are told apart by their bodies.
	frames := map[string][]byte{}
	for _, r := range records {
		kind := r.Type
		if r.Type == typeReply && strings.Contains(string(r.Raw), `"server_time"`) {
			kind = "ack/ping"
		}
		if frames[kind] == nil {
			frames[kind] = r.Raw
		}
	}

	t.Run("SeedExamples", func(t *testing.T) {
		for typ, example := range seedExamples {
			def := wstest.ServerFrame
			if slices.Contains(clientTypes, typ) {
				def = wstest.ClientFrame
			}
			if err := v.Validate(def, []byte(example)); err != nil {
				t.Errorf("seed example %s: %v", typ, err)
			}
			// Field for field: the real frame has the seed's members at
			// every depth.
			real := frames[typ]
			if real == nil {
				t.Errorf("the session has no %s frame", typ)
				continue
			}
			// Beyond the seed, the welcome carries the redelivery
			// horizon (K-12).
			want := memberPaths(t, []byte(example))
			if typ == typeWelcome {
				want = append(want, "body.redelivery_horizon")
				slices.Sort(want)
			}
			if got := memberPaths(t, real); !slices.Equal(got, want) {
				t.Errorf("%s members\n%v\nseed example\n%v", typ, got, want)
			}
		}
	})

	refused := []struct {
		name   string
		def    string
		frame  string
		change func(f map[string]any)
	}{
		{"ExtraEnvelopeMember", wstest.ServerFrame, typeWelcome, func(f map[string]any) { f["extra"] = true }},
		{"ExtraBodyMember", wstest.ServerFrame, typeWelcome, func(f map[string]any) { body(f)["extra"] = true }},
		{"ExtraDeliveryMember", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "delivery")["lease_secret_digest"] = "x" }},
		{"ExtraEventMember", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "event")["input"] = map[string]any{} }},
		{"ExtraSnapshotMember", wstest.ServerFrame, typeDeliver, func(f map[string]any) {
			obj(obj(body(f), "event"), "snapshot")["input"] = map[string]any{}
		}},
		{"MissingBodyMember", wstest.ServerFrame, typeWelcome, func(f map[string]any) { delete(body(f), "enabled") }},
		{"MissingDeliveryMember", wstest.ServerFrame, typeDeliver, func(f map[string]any) { delete(obj(body(f), "delivery"), "lease_epoch") }},
		{"WelcomeWithoutReplyTo", wstest.ServerFrame, typeWelcome, func(f map[string]any) { delete(f, "reply_to") }},
		{"WelcomeWithoutSession", wstest.ServerFrame, typeWelcome, func(f map[string]any) { delete(f, "session_id") }},
		{"DeliverAsReply", wstest.ServerFrame, typeDeliver, func(f map[string]any) { f["reply_to"] = wstest.NewID() }},
		{"UnknownType", wstest.ServerFrame, typeWelcome, func(f map[string]any) { f["type"] = "events.goodbye" }},
		{"ProtocolVersion2", wstest.ServerFrame, typeWelcome, func(f map[string]any) { f["protocol_version"] = "2" }},
		{"UppercaseID", wstest.ServerFrame, typeWelcome, func(f map[string]any) { f["message_id"] = "ABCDEF0123456789ABCDEF0123456789" }},
		{"EpochLeadingZero", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "delivery")["lease_epoch"] = "01" }},
		{"EpochNumber", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "delivery")["lease_epoch"] = json.Number("1") }},
		{"SequenceNegative", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "event")["sequence"] = "-1" }},
		{"StateLowercase", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "delivery")["state"] = "leased" }},
		{"RequeuedEvent", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "event")["type"] = "task.requeued" }},
		{"SecretShort", wstest.ServerFrame, typeDeliver, func(f map[string]any) { body(f)["lease_secret"] = body(f)["lease_secret"].(string)[:42] }},
		{"SecretPadded", wstest.ServerFrame, typeDeliver, func(f map[string]any) { body(f)["lease_secret"] = body(f)["lease_secret"].(string) + "=" }},
		{"SecretStandardAlphabet", wstest.ServerFrame, typeDeliver, func(f map[string]any) {
			body(f)["lease_secret"] = "+" + body(f)["lease_secret"].(string)[1:]
		}},
		{"TimeWithOffset", wstest.ServerFrame, typeDeliver, func(f map[string]any) { obj(body(f), "delivery")["lease_until"] = "2026-09-17T12:00:00+02:00" }},
		{"CapacityZero", wstest.ServerFrame, typeWelcome, func(f map[string]any) { body(f)["capacity"] = json.Number("0") }},
		{"ErrorWithBody", wstest.ServerFrame, typeError, func(f map[string]any) { f["body"] = map[string]any{} }},
		{"ErrorWithoutCode", wstest.ServerFrame, typeError, func(f map[string]any) { delete(f["error"].(map[string]any), "code") }},
		{"ErrorUnknownCode", wstest.ServerFrame, typeError, func(f map[string]any) { f["error"].(map[string]any)["code"] = "TASK_LEASE_LOST" }},
		{"AckMixesBodies", wstest.ServerFrame, "ack/ping", func(f map[string]any) { body(f)["deduplicated"] = true }},
		{"AckEmptyBody", wstest.ServerFrame, "ack/ping", func(f map[string]any) { f["body"] = map[string]any{} }},
		{"AckWithoutReplyTo", wstest.ServerFrame, typeReply, func(f map[string]any) { delete(f, "reply_to") }},
		{"ServerFrameFromClient", wstest.ClientFrame, typeWelcome, func(map[string]any) {}},
		{"HelloWithSession", wstest.ClientFrame, typeHello, func(f map[string]any) { f["session_id"] = wstest.NewID() }},
		{"HelloWithReplyTo", wstest.ClientFrame, typeHello, func(f map[string]any) { f["reply_to"] = wstest.NewID() }},
		{"HelloWithError", wstest.ClientFrame, typeHello, func(f map[string]any) {
			f["error"] = map[string]any{"code": "INTERNAL", "message": "x"}
		}},
		{"HelloCapacity33", wstest.ClientFrame, typeHello, func(f map[string]any) { body(f)["capacity"] = json.Number("33") }},
		{"HelloCapacityString", wstest.ClientFrame, typeHello, func(f map[string]any) { body(f)["capacity"] = "1" }},
		{"AckWithoutSecret", wstest.ClientFrame, typeAck, func(f map[string]any) { delete(body(f), "lease_secret") }},
		{"AckBadSecret", wstest.ClientFrame, typeAck, func(f map[string]any) { body(f)["lease_secret"] = "not a secret" }},
		{"AckExtraMember", wstest.ClientFrame, typeAck, func(f map[string]any) { body(f)["event_id"] = wstest.NewID() }},
		{"PingWithoutSession", wstest.ClientFrame, typePing, func(f map[string]any) { delete(f, "session_id") }},
		{"PingWithBodyMember", wstest.ClientFrame, typePing, func(f map[string]any) { body(f)["x"] = json.Number("1") }},
		{"ClientFrameFromServer", wstest.ServerFrame, typeHello, func(map[string]any) {}},
	}
	t.Run("Refused", func(t *testing.T) {
		for _, tt := range refused {
			t.Run(tt.name, func(t *testing.T) {
				raw := frames[tt.frame]
				if raw == nil {
					t.Fatal("the session recorded no such frame")
				}
				// The unchanged frame passes as what it is.
				own := wstest.ServerFrame
				if slices.Contains(clientTypes, tt.frame) {
					own = wstest.ClientFrame
				}
				if err := v.Validate(own, raw); err != nil {
					t.Fatalf("the unchanged frame is refused: %v", err)
				}
				f := decodeMap(t, raw)
				tt.change(f)
				changed, err := json.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := v.Validate(tt.def, changed); err == nil {
					t.Fatalf("the schema accepts %s", changed)
				}
			})
		}
	})

	t.Run("DocumentExamples", func(t *testing.T) {
		doc, err := os.ReadFile(docPath)
		if err != nil {
			t.Fatal(err)
		}
		examples := regexp.MustCompile("(?s)<!-- example: (events-[a-z0-9-]+) -->\\s*```json\\n(.*?)```").FindAllSubmatch(doc, -1)
		if len(examples) < 10 {
			t.Fatalf("%d examples in %s, want one for every frame", len(examples), docPath)
		}
		for _, m := range examples {
			name, frame := string(m[1]), m[2]
			var f struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(frame, &f); err != nil {
				t.Fatalf("example %s: %v", name, err)
			}
			def := wstest.ServerFrame
			if slices.Contains(clientTypes, f.Type) || slices.Contains(controlTypes, f.Type) {
				def = wstest.ClientFrame
			}
			if err := v.Validate(def, frame); err != nil {
				t.Errorf("example %s: %v", name, err)
			}
		}
	})
}

// decodeMap decodes a frame keeping numbers as written.
func decodeMap(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var f map[string]any
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// body returns the body of a decoded frame.
func body(f map[string]any) map[string]any { return f["body"].(map[string]any) }

// obj returns the object member name of m.
func obj(m map[string]any, name string) map[string]any { return m[name].(map[string]any) }

// memberPaths returns the sorted dotted paths of every member of the JSON
// object raw, at every depth.
func memberPaths(t *testing.T, raw []byte) []string {
	t.Helper()
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, child := range m {
			out = append(out, prefix+k)
			walk(prefix+k+".", child)
		}
	}
	walk("", decodeMap(t, raw))
	sort.Strings(out)
	return out
}
