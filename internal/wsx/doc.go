// Package wsx is the WebSocket transport shared by Orbit's two WebSocket
// entries, /v1/events/connect (orbit.events.v1) and /v1/workers/connect
// (orbit.workers.v1). It implements conventions C-17 and C-18 and the
// per-connection protections of E-6 and E-14; the frame bodies and the state
// machine of each protocol belong to the protocol's own package.
//
// An Entry checks an upgrade request, upgrades it and counts its
// connections. A Conn is one upgraded connection with a reader and a writer
// goroutine, bounded queues in both directions, the hello and idle read
// deadlines, the write deadline and the session binding. A Frame is the
// envelope of C-18, decoded strictly.
//
// A protocol handler typically looks like this:
//
//	func (m *Module) connect(w http.ResponseWriter, r *http.Request) {
//		c, err := m.entry.Upgrade(w, r)
//		if err != nil {
//			return // the HTTP reply has been written
//		}
//		defer c.Close(wsx.CloseNormal, "")
//		hello, err := c.Recv(c.Context())
//		if err != nil {
//			return
//		}
//		var body helloBody
//		if err := wsx.DecodeBody(hello, &body); err != nil {
//			_ = c.SendError(hello.MessageID, err)
//			return
//		}
//		…
//		if err := c.BindSession(sessionID); err != nil {
//			return
//		}
//		welcome, err := wsx.NewFrame("events.welcome", hello.MessageID, welcomeBody)
//		…
//		_ = c.Send(welcome)
//		for {
//			f, err := c.Recv(c.Context())
//			if err != nil {
//				return
//			}
//			…
//		}
//	}
//
// The route is wrapped in httpx.NoDeadline so that the management deadline
// of C-12 does not apply to it.
package wsx
