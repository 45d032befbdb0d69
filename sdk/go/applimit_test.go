package orbit

import (
	"context"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// refuseForAppLimit answers the hello of c as the server does when the
// application is at its connection limit across all nodes: an error
// CAPACITY_EXCEEDED, then the close 1013 (try again later).
func refuseForAppLimit(c *fakeConn, hello frame) {
	c.t.Helper()
	c.sendError(hello.MessageID, "", CodeCapacityExceeded)
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "hello refused"),
		time.Now().Add(time.Second))
}

// TestN4_WorkerRetriesAfterAppLimitHello: a worker.hello refused because
// the application is at workers.max_connections_per_app is retried with
// backoff, like other capacity refusals; Run does not return.
func TestN4_WorkerRetriesAfterAppLimitHello(t *testing.T) {
	t.Parallel()
	s := setupServer(t, nil)
	startWorker(t, s, WorkerConfig{Backoff: BackoffConfig{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}},
		func(context.Context, *AssignedTask) Outcome { return Succeeded(nil) })
	c1 := s.accept()
	refuseForAppLimit(c1, c1.expect(frameHello))
	c2 := s.accept()
	c2.handshake(idOf("c"), longBeat)
}

// TestN4_ConsumerRetriesAfterAppLimitHello: an events.hello refused
// because the application is at events.max_connections_per_app is retried
// with backoff; Run does not return.
func TestN4_ConsumerRetriesAfterAppLimitHello(t *testing.T) {
	t.Parallel()
	s := setupEventServer(t, nil)
	startConsumer(t, s, EventConsumerConfig{Backoff: BackoffConfig{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}},
		func(context.Context, *Delivery) error { return nil })
	c1 := s.accept()
	refuseForAppLimit(c1, c1.expect(frameEventsHello))
	c2 := s.accept()
	c2.welcomeEvents(idOf("4"), longBeat)
}
