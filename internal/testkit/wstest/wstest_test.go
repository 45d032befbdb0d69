package wstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// testSchema is a protocol of two frames: the client sends "echo.request"
// with a body {text}; the server answers "echo.reply" and may send "note".
const testSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$defs": {
    "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    "clientFrame": {
      "type": "object",
      "properties": {
        "protocol_version": {"const": "1"},
        "type": {"const": "echo.request"},
        "message_id": {"$ref": "#/$defs/id"},
        "body": {
          "type": "object",
          "properties": {"text": {"type": "string"}},
          "required": ["text"],
          "additionalProperties": false
        }
      },
      "required": ["protocol_version", "type", "message_id", "body"],
      "additionalProperties": false
    },
    "serverFrame": {
      "type": "object",
      "properties": {
        "protocol_version": {"const": "1"},
        "type": {"enum": ["echo.reply", "note"]},
        "message_id": {"$ref": "#/$defs/id"},
        "reply_to": {"$ref": "#/$defs/id"},
        "body": {"type": "object"}
      },
      "required": ["protocol_version", "type", "message_id", "body"],
      "additionalProperties": false
    }
  }
}`

const testProtocol = "test.echo.v1"

func writeSchema(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "echo.schema.json")
	if err := os.WriteFile(path, []byte(testSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidator(t *testing.T) {
	t.Parallel()
	v := MustLoad(t, writeSchema(t))
	id := NewID()
	tests := []struct {
		name  string
		def   string
		frame string
		ok    bool
	}{
		{"ClientValid", ClientFrame, `{"protocol_version":"1","type":"echo.request","message_id":"` + id + `","body":{"text":"hi"}}`, true},
		{"ClientExtraField", ClientFrame, `{"protocol_version":"1","type":"echo.request","message_id":"` + id + `","body":{"text":"hi"},"x":1}`, false},
		{"ClientExtraBodyField", ClientFrame, `{"protocol_version":"1","type":"echo.request","message_id":"` + id + `","body":{"text":"hi","x":1}}`, false},
		{"ClientBadID", ClientFrame, `{"protocol_version":"1","type":"echo.request","message_id":"ABC","body":{"text":"hi"}}`, false},
		{"ServerFrameAsClient", ClientFrame, `{"protocol_version":"1","type":"note","message_id":"` + id + `","body":{}}`, false},
		{"ServerValid", ServerFrame, `{"protocol_version":"1","type":"note","message_id":"` + id + `","body":{}}`, true},
		{"ServerWrongVersion", ServerFrame, `{"protocol_version":"2","type":"note","message_id":"` + id + `","body":{}}`, false},
		{"NotJSON", ServerFrame, `{"protocol_version":`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Validate(tt.def, []byte(tt.frame))
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%s) = %v, want ok=%v", tt.def, err, tt.ok)
			}
		})
	}
	t.Run("UnknownDefinition", func(t *testing.T) {
		if err := v.Validate("otherFrame", []byte(`{}`)); err == nil {
			t.Fatal("Validate accepted an unknown definition")
		}
	})
	t.Run("MissingFile", func(t *testing.T) {
		if _, err := LoadValidator(filepath.Join(t.TempDir(), "none.json")); err == nil {
			t.Fatal("LoadValidator accepted a missing file")
		}
	})
	t.Run("MissingDefinitions", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "empty.json")
		if err := os.WriteFile(path, []byte(`{"$defs": {}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadValidator(path); err == nil {
			t.Fatal("LoadValidator accepted a schema without clientFrame and serverFrame")
		}
	})
}

// echoServer answers each echo.request with a note and then the reply,
// and closes with 4000 when the text is "bye". It refuses upgrades without
// the test sub-protocol with 426 in the envelope of C-6.
func echoServer(t *testing.T, serverFrame func(typ, replyTo string) []byte) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{testProtocol}}
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Sec-WebSocket-Protocol"), testProtocol) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUpgradeRequired)
			fmt.Fprint(w, `{"request_id":"`+NewID()+`","error":{"code":"PROTOCOL_REQUIRED","message":"sub-protocol required"}}`)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer ws.Close()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var f Frame
			if err := json.Unmarshal(data, &f); err != nil {
				return
			}
			var body struct{ Text string }
			_ = json.Unmarshal(f.Body, &body)
			if body.Text == "bye" {
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "bye"), time.Now().Add(time.Second))
				continue
			}
			_ = ws.WriteMessage(websocket.TextMessage, serverFrame("note", ""))
			_ = ws.WriteMessage(websocket.TextMessage, serverFrame("echo.reply", f.MessageID))
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func goodFrame(typ, replyTo string) []byte {
	f := Frame{ProtocolVersion: "1", Type: typ, MessageID: NewID(), ReplyTo: replyTo, Body: json.RawMessage(`{}`)}
	b, _ := json.Marshal(f)
	return b
}

func TestClient(t *testing.T) {
	t.Parallel()
	v := MustLoad(t, writeSchema(t))
	url := echoServer(t, goodFrame)
	rec := &Recorder{}
	c := Dial(t, Options{URL: url, Subprotocol: testProtocol, Validator: v, Recorder: rec, Timeout: 5 * time.Second})
	if c.Subprotocol() != testProtocol {
		t.Fatalf("sub-protocol %q, want %q", c.Subprotocol(), testProtocol)
	}

	id := c.Send("echo.request", map[string]string{"text": "hi"})
	reply := c.Reply(id)
	if reply.Type != "echo.reply" {
		t.Fatalf("reply %s, want echo.reply", reply)
	}
	// The note arrived first and stayed queued while Reply looked past it.
	if note := c.Next(); note.Type != "note" {
		t.Fatalf("next %s, want the queued note", note)
	}
	c.ExpectNone(50 * time.Millisecond)

	// A frame outside the contract, sent on purpose: the schema refuses it.
	bad := c.NewFrame("echo.request", map[string]any{"text": "hi", "extra": true})
	c.SendInvalid(bad)
	c.Reply(bad.MessageID)
	c.NextType("note")

	c.Send("echo.request", map[string]string{"text": "bye"})
	if rest := c.ExpectClose(4000); len(rest) != 0 {
		t.Fatalf("frames left after close: %d", len(rest))
	}

	records := rec.Records()
	if len(records) != 7 {
		t.Fatalf("recorded %d frames, want 7 (3 sent, 4 received)", len(records))
	}
	for _, r := range records {
		if !r.Checked || r.Err != nil {
			t.Errorf("record %s %s: checked %v, err %v", r.Direction, r.Raw, r.Checked, r.Err)
		}
	}
	if got := len(c.Records()); got != len(records) {
		t.Errorf("client records %d, recorder %d", got, len(records))
	}
}

// captureTB records Errorf calls instead of failing the test.
type captureTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (c *captureTB) Helper() {}

func (c *captureTB) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errors = append(c.errors, fmt.Sprintf(format, args...))
}

func (c *captureTB) reported() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errors...)
}

func TestClientReportsSchemaViolations(t *testing.T) {
	t.Parallel()
	v := MustLoad(t, writeSchema(t))
	// The server's frames carry a member the schema does not allow.
	url := echoServer(t, func(typ, replyTo string) []byte {
		f := goodFrame(typ, replyTo)
		return append(f[:len(f)-1], `,"extra":1}`...)
	})
	tb := &captureTB{TB: t}
	c := Dial(tb, Options{URL: url, Subprotocol: testProtocol, Validator: v, Timeout: 5 * time.Second})

	// A frame sent as invalid that the schema accepts is reported too.
	c.SendInvalid(c.NewFrame("echo.request", map[string]string{"text": "fine"}))
	c.Next()
	c.Next()
	got := tb.reported()
	if len(got) != 3 {
		t.Fatalf("reported %d problems, want 3 (an accepted invalid frame, two bad server frames): %q", len(got), got)
	}
	if !strings.Contains(got[0], "accepts a frame sent as invalid") || !strings.Contains(got[1], "breaks the schema") {
		t.Fatalf("reports %q", got)
	}
	for _, r := range c.Records() {
		if r.Err == nil {
			t.Errorf("record %s %s has no error", r.Direction, r.Raw)
		}
	}
}

func TestDialRefused(t *testing.T) {
	t.Parallel()
	url := echoServer(t, goodFrame)
	r := DialRefused(t, Options{URL: url})
	if r.Status != http.StatusUpgradeRequired {
		t.Fatalf("status %d, want 426", r.Status)
	}
	if _, code, _, err := r.Envelope(); err != nil || code != "PROTOCOL_REQUIRED" {
		t.Fatalf("envelope code %q, err %v", code, err)
	}
}
