package workers_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/wstest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// clientTypes and serverTypes are the frame types of each direction,
// sorted.
var (
	clientTypes = []string{typeComplete, typeRelease, typeHello, typePing}
	serverTypes = []string{typeAck, typeError, typeAssign, typeCancel, typeWelcome}
)

// TestC19_FramesMatchSchema: every client in this package validates each
// frame it sends or receives against docs/api/workers.schema.json and fails
// its test on a mismatch. This test runs one session that produces every
// frame type, checks that all of them were validated, and checks that the
// schema refuses what the protocol refuses and accepts the examples of
// workers.md.
func TestC19_FramesMatchSchema(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := schema(t)

	w := e.connect(t, e.cred, 2)
	first := e.submit(t, e.cred, submitParams{Idempotent: true})
	e.submit(t, e.cred, submitParams{Idempotent: true})
	a, b := w.assign(t), w.assign(t)
	if a.Task.ID != first {
		a, b = b, a
	}
	wantPingAck(t, w.ping(t))
	e.cancel(t, e.cred, a.Task.ID)
	w.NextType(typeCancel)
	wantCompleteAck(t, w.complete(t, completeBody{proof: a.proof(), Outcome: tasks.OutcomeCancelled}))
	if f := w.Request(typeRelease, releaseBody{proof: b.proof(), Reason: "not started"}); f.Type != typeAck {
		t.Fatalf("release answer %s", f)
	}
	c := w.assign(t)
	wrong := c.proof()
	wrong.LeaseSecret = otherSecret(wrong.LeaseSecret)
	wantError(t, w.complete(t, completeBody{proof: wrong, Outcome: tasks.OutcomeSucceeded}), string(httpx.CodeTaskLeaseLost))
	w.succeed(t, c)

	t.Run("EveryFrameValidated", func(t *testing.T) {
		seen := map[wstest.Direction][]string{}
		acks := map[string]bool{}
		for _, r := range w.Records() {
			if !r.Checked || r.Expect != wstest.Valid || r.Err != nil {
				t.Errorf("%s frame not validated or invalid (%v): %s", r.Direction, r.Err, r.Raw)
			}
			if !slices.Contains(seen[r.Direction], r.Type) {
				seen[r.Direction] = append(seen[r.Direction], r.Type)
			}
			var f struct {
				Body map[string]json.RawMessage `json:"body"`
			}
			_ = json.Unmarshal(r.Raw, &f)
			switch {
			case r.Type == typeAck && f.Body["deduplicated"] != nil:
				acks["complete"] = true
			case r.Type == typeAck && f.Body["released"] != nil:
				acks["release"] = true
			case r.Type == typeAck && f.Body["server_time"] != nil:
				acks["ping"] = true
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
		if len(acks) != 3 {
			t.Errorf("ack bodies seen %v, want complete, release and ping", acks)
		}
	})

	// Frames the protocol refuses; each is a real frame of the session
	// changed in one place.
	var welcome, assign, hello, ping, errFrame, pingAck []byte
	for _, r := range w.Records() {
		var f struct {
			Body map[string]json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(r.Raw, &f)
		switch {
		case r.Type == typeWelcome:
			welcome = r.Raw
		case r.Type == typeAssign && assign == nil:
			assign = r.Raw
		case r.Type == typeHello:
			hello = r.Raw
		case r.Type == typePing && ping == nil:
			ping = r.Raw
		case r.Type == typeError:
			errFrame = r.Raw
		case r.Type == typeAck && f.Body["server_time"] != nil:
			pingAck = r.Raw
		}
	}
	refused := []struct {
		name   string
		def    string
		frame  []byte
		change func(f map[string]any)
	}{
		{"ExtraEnvelopeMember", wstest.ServerFrame, welcome, func(f map[string]any) { f["extra"] = true }},
		{"ExtraBodyMember", wstest.ServerFrame, welcome, func(f map[string]any) { body(f)["extra"] = true }},
		{"ExtraTaskMember", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["task"].(map[string]any)["state"] = "RUNNING" }},
		{"MissingBodyMember", wstest.ServerFrame, welcome, func(f map[string]any) { delete(body(f), "server_time") }},
		{"WelcomeWithoutReplyTo", wstest.ServerFrame, welcome, func(f map[string]any) { delete(f, "reply_to") }},
		{"WelcomeWithoutSession", wstest.ServerFrame, welcome, func(f map[string]any) { delete(f, "session_id") }},
		{"AssignAsReply", wstest.ServerFrame, assign, func(f map[string]any) { f["reply_to"] = wstest.NewID() }},
		{"UnknownType", wstest.ServerFrame, welcome, func(f map[string]any) { f["type"] = "worker.goodbye" }},
		{"ProtocolVersion2", wstest.ServerFrame, welcome, func(f map[string]any) { f["protocol_version"] = "2" }},
		{"UppercaseID", wstest.ServerFrame, welcome, func(f map[string]any) { f["message_id"] = "ABCDEF0123456789ABCDEF0123456789" }},
		{"EpochLeadingZero", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["epoch"] = "01" }},
		{"EpochNumber", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["epoch"] = json.Number("1") }},
		{"RevisionNegative", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["task"].(map[string]any)["revision"] = "-1" }},
		{"SecretPadded", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["lease_secret"] = body(f)["lease_secret"].(string) + "=" }},
		{"SecretNonCanonical", wstest.ServerFrame, assign, func(f map[string]any) {
			s := body(f)["lease_secret"].(string)
			body(f)["lease_secret"] = s[:42] + "B"
		}},
		{"LeaseUntilWithOffset", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["lease_until"] = "2026-09-17T12:00:00+02:00" }},
		{"AttemptsZero", wstest.ServerFrame, assign, func(f map[string]any) { body(f)["task"].(map[string]any)["attempts"] = json.Number("0") }},
		{"ErrorWithBody", wstest.ServerFrame, errFrame, func(f map[string]any) { f["body"] = map[string]any{} }},
		{"ErrorWithoutCode", wstest.ServerFrame, errFrame, func(f map[string]any) { delete(f["error"].(map[string]any), "code") }},
		{"ErrorLowercaseCode", wstest.ServerFrame, errFrame, func(f map[string]any) { f["error"].(map[string]any)["code"] = "lease_lost" }},
		{"AckMixesBodies", wstest.ServerFrame, pingAck, func(f map[string]any) { body(f)["released"] = true }},
		{"AckEmptyBody", wstest.ServerFrame, pingAck, func(f map[string]any) { f["body"] = map[string]any{} }},
		{"ServerFrameFromClient", wstest.ClientFrame, welcome, func(map[string]any) {}},
		{"HelloWithSession", wstest.ClientFrame, hello, func(f map[string]any) { f["session_id"] = wstest.NewID() }},
		{"HelloCapacity33", wstest.ClientFrame, hello, func(f map[string]any) { body(f)["capacity"] = json.Number("33") }},
		{"HelloCapacityString", wstest.ClientFrame, hello, func(f map[string]any) { body(f)["capacity"] = "2" }},
		{"PingWithoutSession", wstest.ClientFrame, ping, func(f map[string]any) { delete(f, "session_id") }},
		{"PingWithBodyMember", wstest.ClientFrame, ping, func(f map[string]any) { body(f)["x"] = json.Number("1") }},
		{"ClientFrameFromServer", wstest.ServerFrame, hello, func(map[string]any) {}},
	}
	t.Run("Refused", func(t *testing.T) {
		for _, tt := range refused {
			t.Run(tt.name, func(t *testing.T) {
				if tt.frame == nil {
					t.Fatal("the session recorded no such frame")
				}
				// The unchanged frame passes as what it is.
				own := wstest.ServerFrame
				if slices.Contains(clientTypes, frameType(t, tt.frame)) {
					own = wstest.ClientFrame
				}
				if err := v.Validate(own, tt.frame); err != nil {
					t.Fatalf("the unchanged frame is refused: %v", err)
				}
				f := decodeMap(t, tt.frame)
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
		examples := regexp.MustCompile("(?s)<!-- example: (workers-[a-z0-9-]+) -->\\s*```json\\n(.*?)```").FindAllSubmatch(doc, -1)
		if len(examples) < 10 {
			t.Fatalf("%d examples in %s, want one for every frame", len(examples), docPath)
		}
		for _, m := range examples {
			name, frame := string(m[1]), m[2]
			def := wstest.ServerFrame
			if slices.Contains(clientTypes, frameType(t, frame)) {
				def = wstest.ClientFrame
			}
			if err := v.Validate(def, frame); err != nil {
				t.Errorf("example %s: %v", name, err)
			}
		}
	})
}

// decodeMap decodes a frame keeping numbers as they are written.
func decodeMap(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var f map[string]any
	if err := d.Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

func body(f map[string]any) map[string]any { return f["body"].(map[string]any) }

func frameType(t *testing.T, raw []byte) string {
	t.Helper()
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("frame %s: %v", raw, err)
	}
	return f.Type
}
