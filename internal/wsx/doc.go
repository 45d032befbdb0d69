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
// Entry.Serve runs the skeleton every protocol shares: upgrade, the hello
// (refused with an error frame and 1008, or 1011 when UNAVAILABLE), the
// request loop, the dispatcher goroutine and the session's end, counted so
// that Shutdown waits for it. A protocol supplies only its hello and its
// Session:
//
//	func (m *Module) connect(w http.ResponseWriter, r *http.Request) {
//		m.entry.Serve(w, r, "events.hello", m.hello)
//	}
//
//	func (m *Module) hello(c *wsx.Conn, f *wsx.Frame, r *http.Request) (wsx.Session, error) {
//		var body helloBody
//		if err := wsx.DecodeBody(f, &body); err != nil {
//			return nil, err // refused
//		}
//		…
//		if err := c.Welcome(sessionID, f, "events.welcome", welcomeBody); err != nil {
//			… // close the recorded session
//			return nil, nil
//		}
//		return &session{…}, nil // Handle, Dispatch, End
//	}
//
// The route is wrapped in httpx.NoDeadline so that the management deadline
// of C-12 does not apply to it.
package wsx
