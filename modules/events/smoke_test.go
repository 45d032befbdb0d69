package events_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/internal/wsx"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var consumerPermissions = []string{"events:manage", "events:read", "events:consume", "tasks:submit", "tasks:read", "tasks:cancel"}

type frame struct {
	ProtocolVersion string          `json:"protocol_version"`
	Type            string          `json:"type"`
	MessageID       string          `json:"message_id"`
	SessionID       string          `json:"session_id,omitempty"`
	ReplyTo         string          `json:"reply_to,omitempty"`
	Body            json.RawMessage `json:"body,omitempty"`
	Error           *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func TestDeliverAndAckEndToEnd(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: consumerPermissions})
	resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/subscriptions", Token: cred.Token, IdempotencyKey: "s1",
		Body: `{"name":"smoke","queue_id":"` + cred.QueueID + `","types":["task.cancelled"]}`})
	if resp.Status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", resp.Status, resp.Body)
	}
	var created struct {
		Subscription struct {
			ID string `json:"id"`
		} `json:"subscription"`
	}
	json.Unmarshal(resp.Data, &created)
	resp = srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks", Token: cred.Token, IdempotencyKey: "t1",
		Body: `{"queue_id":"` + cred.QueueID + `","input":{"x":1}}`})
	var submitted struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	json.Unmarshal(resp.Data, &submitted)
	resp = srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/tasks/" + submitted.Task.ID + ":cancel", Token: cred.Token, IdempotencyKey: "c1", Body: `{}`})
	if resp.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", resp.Status, resp.Body)
	}

	header := http.Header{"Authorization": {"Bearer " + cred.Token}, "Sec-WebSocket-Protocol": {"orbit.events.v1"}}
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/events/connect", header)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	send := func(f frame) {
		t.Helper()
		f.ProtocolVersion, f.MessageID = "1", wsx.NewID()
		if err := conn.WriteJSON(f); err != nil {
			t.Fatal(err)
		}
	}
	read := func() frame {
		t.Helper()
		var f frame
		if err := conn.ReadJSON(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	send(frame{Type: "events.hello", Body: json.RawMessage(`{"subscription_id":"` + created.Subscription.ID + `","capacity":1}`)})
	welcome := read()
	if welcome.Type != "events.welcome" || welcome.SessionID == "" {
		t.Fatalf("welcome: %+v", welcome)
	}
	deliver := read()
	if deliver.Type != "event.deliver" {
		t.Fatalf("deliver: %+v %s", deliver, deliver.Body)
	}
	var body struct {
		Delivery struct {
			ID         string `json:"id"`
			LeaseEpoch string `json:"lease_epoch"`
		} `json:"delivery"`
		Event struct {
			Type        string `json:"type"`
			AggregateID string `json:"aggregate_id"`
		} `json:"event"`
		LeaseSecret string `json:"lease_secret"`
	}
	json.Unmarshal(deliver.Body, &body)
	if body.Event.Type != "task.cancelled" || body.Event.AggregateID != submitted.Task.ID || body.Delivery.LeaseEpoch != "1" || len(body.LeaseSecret) != 43 {
		t.Fatalf("deliver body: %s", deliver.Body)
	}
	ackBody := json.RawMessage(`{"delivery_id":"` + body.Delivery.ID + `","epoch":"1","lease_secret":"` + body.LeaseSecret + `"}`)
	send(frame{Type: "event.ack", SessionID: welcome.SessionID, Body: ackBody})
	ack := read()
	if ack.Type != "ack" || !strings.Contains(string(ack.Body), `"deduplicated":false`) {
		t.Fatalf("ack: %+v %s", ack, ack.Body)
	}
	send(frame{Type: "event.ack", SessionID: welcome.SessionID, Body: ackBody})
	again := read()
	if again.Type != "ack" || !strings.Contains(string(again.Body), `"deduplicated":true`) {
		t.Fatalf("repeat ack: %+v %s", again, again.Body)
	}
}
