package wsx

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orbitrun/orbit/internal/httpx"
)

// seedFrames are the frames of seed 001 §5–7, as printed there.
var seedFrames = map[string]string{
	"Hello": helloText,
	"Welcome": `{
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
	"Ack": `{
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
	"AckReply": `{
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
	"Ping": `{
  "protocol_version": "1",
  "type": "events.ping",
  "message_id": "ffffffffffffffffffffffffffffffff",
  "session_id": "44444444444444444444444444444444",
  "body": {}
}`,
	"Error": `{"protocol_version":"1","type":"error","message_id":"cccccccccccccccccccccccccccccccc","reply_to":"dddddddddddddddddddddddddddddddd","session_id":"44444444444444444444444444444444","error":{"code":"DELIVERY_LEASE_LOST","message":"lease lost"}}`,
}

func TestC18_SeedFramesDecode(t *testing.T) {
	t.Parallel()
	for name, text := range seedFrames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, err := DecodeFrame([]byte(text))
			if err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if f.ProtocolVersion != "1" || !httpx.ValidID(f.MessageID) {
				t.Errorf("frame = %+v", f)
			}
			// The encoded frame decodes to the same frame.
			b, err := f.encode()
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeFrame(b)
			if err != nil {
				t.Fatalf("DecodeFrame(encode): %v", err)
			}
			if !sameFrame(again, f) {
				t.Errorf("round trip = %+v, want %+v", again, f)
			}
		})
	}
}

// sameFrame reports whether a and b are the same frame, ignoring
// insignificant whitespace in the body.
func sameFrame(a, b *Frame) bool {
	compact := func(v jsontext.Value) string {
		v = v.Clone()
		if v != nil {
			_ = v.Compact()
		}
		return string(v)
	}
	return a.ProtocolVersion == b.ProtocolVersion && a.Type == b.Type && a.MessageID == b.MessageID &&
		a.SessionID == b.SessionID && a.ReplyTo == b.ReplyTo && compact(a.Body) == compact(b.Body) &&
		(a.Error == nil) == (b.Error == nil) && (a.Error == nil || *a.Error == *b.Error)
}

// badEnvelope is a client text that DecodeFrame must reject; the
// connection tests check that each closes the connection with 1008.
type badEnvelope struct {
	name string
	text string
	// want is part of the expected error message.
	want string
}

var badEnvelopes = []badEnvelope{
	{"NotJSON", `hello`, "must be a JSON object"},
	{"Array", `[]`, "must be a JSON object"},
	{"Empty", ``, "is empty"},
	{"Truncated", `{"protocol_version":"1"`, "truncated"},
	{"UnknownField", withMember(`"extra":1`), `unknown field "extra"`},
	{"OtherCaseName", strings.Replace(helloText, `"type"`, `"Type"`, 1), `unknown field "Type"`},
	{"DuplicateKey", withMember(`"type":"events.hello"`), `duplicate field "type"`},
	{"DuplicateKeyInBody", strings.Replace(helloText, `"capacity":1`, `"capacity":1,"capacity":2`, 1), `duplicate field "body.capacity"`},
	{"DuplicateKeyDeepInBody", strings.Replace(helloText, `"capacity":1`, `"capacity":1,"x":[{"a":1,"a":2}]`, 1), `duplicate field "body.x.0.a"`},
	{"NestedPastTheDepthLimitInBody", strings.Replace(helloText, `"capacity":1`, `"capacity":1,"x":`+strings.Repeat("[", httpx.MaxJSONDepth-1)+strings.Repeat("]", httpx.MaxJSONDepth-1), 1),
		fmt.Sprintf("nests objects and arrays deeper than %d levels", httpx.MaxJSONDepth)},
	{"InvalidUTF8", strings.Replace(helloText, `"capacity":1`, "\"capacity\":1,\"x\":\"\xff\"", 1), "invalid UTF-8"},
	{"TrailingObject", helloText + ` {}`, "data after the JSON object"},
	{"TrailingGarbage", helloText + `x`, "data after the JSON object"},
	{"MissingVersion", strings.Replace(helloText, `"protocol_version":"1",`, ``, 1), `missing required field "protocol_version"`},
	{"WrongVersion", strings.Replace(helloText, `"protocol_version":"1"`, `"protocol_version":"2"`, 1), `"protocol_version" must be "1"`},
	{"NumericVersion", strings.Replace(helloText, `"protocol_version":"1"`, `"protocol_version":1`, 1), `"protocol_version" must be a string`},
	{"NullVersion", strings.Replace(helloText, `"protocol_version":"1"`, `"protocol_version":null`, 1), `"protocol_version" must be a string`},
	{"MissingType", strings.Replace(helloText, `"type":"events.hello",`, ``, 1), `missing required field "type"`},
	{"EmptyType", strings.Replace(helloText, `"events.hello"`, `""`, 1), `"type" must be`},
	{"UpperCaseType", strings.Replace(helloText, `"events.hello"`, `"Events.Hello"`, 1), `"type" must be`},
	{"MissingMessageID", strings.Replace(helloText, `"message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",`, ``, 1), `missing required field "message_id"`},
	{"UpperCaseMessageID", strings.Replace(helloText, idA, strings.ToUpper(idA), 1), `"message_id" must be 32 lowercase`},
	{"ShortMessageID", strings.Replace(helloText, idA, idA[1:], 1), `"message_id" must be 32 lowercase`},
	{"NullSessionID", withMember(`"session_id":null`), `"session_id" must be a string`},
	{"EmptySessionID", withMember(`"session_id":""`), `"session_id" must be 32 lowercase`},
	{"BadReplyTo", withMember(`"reply_to":"x"`), `"reply_to" must be 32 lowercase`},
	{"BodyArray", strings.Replace(helloText, `"body":{"subscription_id":"22222222222222222222222222222222","capacity":1}`, `"body":[]`, 1), `"body" must be an object`},
	{"BodyNull", strings.Replace(helloText, `"body":{"subscription_id":"22222222222222222222222222222222","capacity":1}`, `"body":null`, 1), `"body" must be an object`},
	{"BodyAndError", strings.Replace(withMember(`"error":{"code":"X","message":"m"}`), `"events.hello"`, `"error"`, 1), `must not have field "body"`},
	{"ErrorInOtherType", withMember(`"error":{"code":"X","message":"m"}`), `"error" is only allowed in an error frame`},
	{"ErrorTypeWithoutError", `{"protocol_version":"1","type":"error","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`, `must have field "error"`},
	{"ErrorUnknownMember", `{"protocol_version":"1","type":"error","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","error":{"code":"X","message":"m","detail":1}}`, `unknown field "detail"`},
	{"ErrorWithoutMessage", `{"protocol_version":"1","type":"error","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","error":{"code":"X"}}`, `must have a code and a message`},
	{"ErrorLowerCaseCode", `{"protocol_version":"1","type":"error","message_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","error":{"code":"x","message":"m"}}`, `"error.code" must be`},
}

// withMember returns helloText with member added at the front.
func withMember(member string) string {
	return "{" + member + "," + helloText[1:]
}

func TestC18_DecodeFrameIsStrict(t *testing.T) {
	t.Parallel()
	for _, tt := range badEnvelopes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := DecodeFrame([]byte(tt.text))
			he, ok := errors.AsType[*httpx.Error](err)
			if !ok || he.Code != httpx.CodeInvalidArgument {
				t.Fatalf("DecodeFrame = %+v, %v; want INVALID_ARGUMENT", f, err)
			}
			if !strings.Contains(he.Message, tt.want) {
				t.Errorf("message %q does not contain %q", he.Message, tt.want)
			}
		})
	}
}

func TestC18_DecodeFrameNeverRepeatsValues(t *testing.T) {
	t.Parallel()
	secret := "SK_" + strings.Repeat("Z", 29)
	for _, text := range []string{
		withMember(`"session_id":"` + secret + `"`),
		withMember(`"reply_to":"` + secret + `"`),
		strings.Replace(helloText, `"events.hello"`, `"`+secret+`"`, 1),
	} {
		_, err := DecodeFrame([]byte(text))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("DecodeFrame error = %v, want one that does not repeat the value", err)
		}
	}
}

// helloBody is the body of events.hello, declared as a protocol would.
type helloBody struct {
	SubscriptionID *string `json:"subscription_id"`
	Capacity       *int    `json:"capacity"`
}

// ackBody is the body of event.ack.
type ackBody struct {
	DeliveryID  *string       `json:"delivery_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *Secret       `json:"lease_secret"`
}

func TestC18_DecodeBody(t *testing.T) {
	t.Parallel()
	ack, err := DecodeFrame([]byte(seedFrames["Ack"]))
	if err != nil {
		t.Fatal(err)
	}
	var body ackBody
	if err := DecodeBody(ack, &body); err != nil {
		t.Fatalf("DecodeBody: %v", err)
	}
	if *body.DeliveryID != strings.Repeat("3", 32) || *body.Epoch != 1 || *body.LeaseSecret != (Secret{}) {
		t.Errorf("body = %+v", body)
	}

	tests := []struct {
		name string
		body string
		dst  any
		want string
	}{
		{"UnknownField", `{"capacity":1,"extra":true}`, &helloBody{}, `unknown field "body.extra"`},
		{"OtherCaseName", `{"Capacity":1}`, &helloBody{}, `unknown field "body.Capacity"`},
		{"WrongType", `{"capacity":"1"}`, &helloBody{}, `field "body.capacity" must be an integer, not string`},
		{"Fraction", `{"capacity":1.5}`, &helloBody{}, `field "body.capacity" must be an integer`},
		{"EpochNumber", `{"epoch":1}`, &ackBody{}, `field "body.epoch" must be a canonical decimal string`},
		{"EpochLeadingZero", `{"epoch":"01"}`, &ackBody{}, `field "body.epoch" must be a canonical decimal string`},
		{"EpochOutOfRange", `{"epoch":"18446744073709551616"}`, &ackBody{}, `field "body.epoch" must be a canonical decimal string`},
		{"SecretPadded", `{"lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`, &ackBody{}, `field "body.lease_secret" must be 32 bytes`},
		{"SecretNotCanonical", `{"lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB"}`, &ackBody{}, `field "body.lease_secret" must be 32 bytes`},
		{"SecretNumber", `{"lease_secret":1}`, &ackBody{}, `field "body.lease_secret" must be 32 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &Frame{ProtocolVersion: "1", Type: "events.hello", MessageID: idA, Body: []byte(tt.body)}
			err := DecodeBody(f, tt.dst)
			he, ok := errors.AsType[*httpx.Error](err)
			if !ok || he.Code != httpx.CodeInvalidArgument || !strings.Contains(he.Message, tt.want) {
				t.Fatalf("DecodeBody = %v, want INVALID_ARGUMENT containing %q", err, tt.want)
			}
		})
	}

	t.Run("MissingBody", func(t *testing.T) {
		t.Parallel()
		err := DecodeBody(&Frame{ProtocolVersion: "1", Type: "events.ping", MessageID: idA}, &helloBody{})
		if he, ok := errors.AsType[*httpx.Error](err); !ok || he.Message != `missing required field "body"` {
			t.Fatalf("DecodeBody = %v", err)
		}
	})
	t.Run("RequiredPaths", func(t *testing.T) {
		t.Parallel()
		var b helloBody
		if err := DecodeBody(&Frame{Body: []byte(`{"capacity":null}`)}, &b); err != nil {
			t.Fatal(err)
		}
		err := httpx.Required(
			httpx.Field{Path: "body.subscription_id", Present: b.SubscriptionID != nil},
			httpx.Field{Path: "body.capacity", Present: b.Capacity != nil},
		)
		if err == nil || !strings.Contains(err.Error(), `"body.capacity"`) {
			t.Fatalf("Required = %v", err)
		}
	})
	t.Run("NotAPointer", func(t *testing.T) {
		t.Parallel()
		err := DecodeBody(&Frame{Body: []byte(`{}`)}, helloBody{})
		if _, ok := errors.AsType[*httpx.Error](err); ok || err == nil {
			t.Fatalf("DecodeBody(non-pointer) = %v, want a plain error", err)
		}
	})
}

func TestC18_CanonicalSecret(t *testing.T) {
	t.Parallel()
	zero := strings.Repeat("A", 43)
	random := NewSecret()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"Zero", zero, true},
		{"Random", random.Encode(), true},
		{"AllOnes", strings.Repeat("_", 42) + "w", true},
		{"Padded", zero + "=", false},
		{"Short", zero[1:], false},
		{"Long", zero + "A", false},
		{"Empty", "", false},
		{"StandardPlus", "+" + zero[1:], false},
		{"StandardSlash", "/" + zero[1:], false},
		{"NonZeroTrailingBits", zero[:42] + "B", false},
		{"AllOnesTrailingBits", strings.Repeat("_", 43), false},
		{"Newline", zero[:20] + "\n" + zero[:22], false},
		{"Space", zero[:20] + " " + zero[:22], false},
		{"NonASCII", zero[:41] + "é", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSecret(tt.in)
			if !tt.ok {
				he, ok := errors.AsType[*httpx.Error](err)
				if !ok || he.Code != httpx.CodeInvalidArgument || he.Message != secretMessage {
					t.Fatalf("ParseSecret(%q) = %v, want INVALID_ARGUMENT", tt.in, err)
				}
				return
			}
			if err != nil || s.Encode() != tt.in {
				t.Fatalf("ParseSecret(%q) = %v; Encode = %q", tt.in, err, s.Encode())
			}
		})
	}

	t.Run("NeverPrinted", func(t *testing.T) {
		t.Parallel()
		text := random.Encode()
		var sb strings.Builder
		logger := slog.New(slog.NewJSONHandler(&sb, nil))
		logger.Info("x", slog.Any("secret", random))
		for _, s := range []string{random.String(), fmt.Sprintf("%v %+v %s", random, struct{ S Secret }{random}, random), sb.String()} {
			if strings.Contains(s, text) {
				t.Errorf("%q contains the secret", s)
			}
		}
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(struct {
			S Secret `json:"s"`
		}{random})
		if err != nil || string(b) != `{"s":"`+random.Encode()+`"}` {
			t.Fatalf("Marshal = %s, %v", b, err)
		}
	})
}

func TestC11_NewID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if !httpx.ValidID(id) || seen[id] {
			t.Fatalf("NewID = %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

// TestC8_FrameAtTheDepthLimitDecodes: a frame that nests exactly
// MaxJSONDepth levels is a valid envelope; what its body holds is then the
// protocol's to judge. One level more is an invalid envelope (see
// badEnvelopes).
func TestC8_FrameAtTheDepthLimitDecodes(t *testing.T) {
	t.Parallel()
	// The body is level 2, so MaxJSONDepth-2 arrays inside it reach the
	// limit.
	arrays := httpx.MaxJSONDepth - 2
	text := strings.Replace(helloText, `"capacity":1`, `"capacity":1,"x":`+strings.Repeat("[", arrays)+strings.Repeat("]", arrays), 1)
	f, err := DecodeFrame([]byte(text))
	if err != nil {
		t.Fatalf("DecodeFrame: %v", err)
	}
	var body struct {
		helloBody
		X jsontext.Value `json:"x"`
	}
	if err := DecodeBody(f, &body); err != nil {
		t.Fatalf("DecodeBody: %v", err)
	}
	if len(body.X) != 2*arrays {
		t.Errorf("body.x has %d bytes, want %d", len(body.X), 2*arrays)
	}
}

// TestC8_EncodeErrorsNeverNameMembers: the json packages name the path
// of a value they cannot encode; NewFrame's error, which is logged, keeps
// only the cause, since the path holds member names of a task's input.
func TestC8_EncodeErrorsNeverNameMembers(t *testing.T) {
	t.Parallel()
	const levels = 10001 // past the json packages' own limit
	input := jsontext.Value(`{"secret_member":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`)
	_, err := NewFrame("task.assign", "", map[string]any{"input": input})
	if err == nil {
		t.Fatal("NewFrame succeeded")
	}
	if strings.Contains(err.Error(), "secret_member") {
		t.Errorf("error %q names a member of the value", err)
	}
}

func TestC18_NewFrame(t *testing.T) {
	t.Parallel()
	f, err := NewFrame("ack", idA, map[string]any{"epoch": httpx.Uint64(7), "lease_secret": Secret{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Body) != `{"epoch":"7","lease_secret":"`+strings.Repeat("A", 43)+`"}` || f.ReplyTo != idA {
		t.Errorf("frame = %+v body %s", f, f.Body)
	}
	f, err = NewFrame("events.ping", "", nil)
	if err != nil || f.Body != nil {
		t.Errorf("NewFrame(nil body) = %+v, %v", f, err)
	}
	if _, err := NewFrame("x", "", func() {}); err == nil {
		t.Error("NewFrame(func) succeeded")
	}
	e := ErrorFrame(idB, "DELIVERY_LEASE_LOST", "lease lost")
	e.ProtocolVersion, e.MessageID = "1", idC
	if err := e.Validate(); err != nil {
		t.Errorf("ErrorFrame: %v", err)
	}
	b, err := e.encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"protocol_version":"1","type":"error","message_id":"cccccccccccccccccccccccccccccccc","reply_to":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","error":{"code":"DELIVERY_LEASE_LOST","message":"lease lost"}}`
	if string(b) != want {
		t.Errorf("encoded error frame\n got %s\nwant %s", b, want)
	}
}
