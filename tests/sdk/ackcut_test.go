package sdk_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// ackCutter forwards TCP connections to an Orbit server and reads the
// WebSocket frames going through. The first time a client's event.ack
// passes, it loses the reply the way a network failure would: the ack
// reaches the server, the client's side of the connection is cut at once,
// and the server's reply is read and discarded. Until that reply has
// arrived (the server has recorded the ACK), new connections wait, so the
// client's repeat of the ACK on a new connection always comes second.
type ackCutter struct {
	t      testing.TB
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	armed   bool
	cutID   string        // message id of the ack that was cut
	replied chan struct{} // closed when the server answered it
	reply   []byte        // the server's reply, never seen by the client
	conns   map[net.Conn]struct{}
	closed  bool
}

// startAckCutter listens on a loopback port and forwards to target until
// the test ends.
func startAckCutter(t testing.TB, target string) *ackCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackCutter{t: t, ln: ln, target: target, armed: true, replied: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's http URL.
func (p *ackCutter) URL() string { return "http://" + p.ln.Addr().String() }

// lostReply waits for the server's answer to the ack that was cut and
// returns it.
func (p *ackCutter) lostReply(timeout time.Duration) ([]byte, bool) {
	select {
	case <-p.replied:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.reply, true
	case <-time.After(timeout):
		return nil, false
	}
}

func (p *ackCutter) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cutting := p.cutID != ""
		p.mu.Unlock()
		if cutting {
			select {
			case <-p.replied:
			case <-time.After(10 * time.Second):
				p.t.Errorf("ackCutter: the server did not answer the cut ack")
			}
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		c := &cutConn{p: p, client: client, server: server}
		go c.upstream()
		go c.downstream()
	}
}

// track records the connections for close; it reports false once the
// proxy is closed.
func (p *ackCutter) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *ackCutter) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// cutConn is one forwarded connection.
type cutConn struct {
	p              *ackCutter
	client, server net.Conn
	mu             sync.Mutex
	cutID          string // set when this connection's ack was cut
}

// upstream copies the client's upgrade request and frames to the server.
// After forwarding the ack to cut, it closes the client's side only.
func (c *cutConn) upstream() {
	defer c.p.wg.Done()
	r := bufio.NewReader(c.client)
	err := copyHead(r, c.server)
	for err == nil {
		var raw, payload []byte
		if raw, payload, err = wstest.ReadWireFrame(r); err != nil {
			break
		}
		if _, err = c.server.Write(raw); err != nil {
			break
		}
		var f struct {
			Type      string `json:"type"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(payload, &f) == nil && f.Type == "event.ack" && c.p.arm(f.MessageID) {
			c.mu.Lock()
			c.cutID = f.MessageID
			c.mu.Unlock()
			c.client.Close()
			return // the server's side stays open until its reply
		}
	}
	c.client.Close()
	if c.cut() == "" {
		c.server.Close()
	}
}

// downstream copies the server's upgrade response and frames to the
// client. Once the connection's ack was cut it discards everything and
// closes the server's side when the reply to that ack has come.
func (c *cutConn) downstream() {
	defer c.p.wg.Done()
	defer c.server.Close()
	r := bufio.NewReader(c.server)
	if err := copyHead(r, c.client); err != nil {
		c.client.Close()
		return
	}
	for {
		raw, payload, err := wstest.ReadWireFrame(r)
		if err != nil {
			c.client.Close()
			return
		}
		if id := c.cut(); id != "" {
			var f struct {
				ReplyTo string `json:"reply_to"`
			}
			if json.Unmarshal(payload, &f) == nil && f.ReplyTo == id {
				c.p.answered(payload)
				return
			}
			continue
		}
		if _, err := c.client.Write(raw); err != nil && c.cut() == "" {
			return
		}
	}
}

// cut returns the message id of this connection's cut ack, or "".
func (c *cutConn) cut() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutID
}

// arm reports whether the ack with message id is the one to cut, the first
// one the proxy sees.
func (p *ackCutter) arm(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed {
		return false
	}
	p.armed, p.cutID = false, id
	return true
}

// answered records the server's reply to the cut ack.
func (p *ackCutter) answered(reply []byte) {
	p.mu.Lock()
	p.reply = append([]byte(nil), reply...)
	p.mu.Unlock()
	close(p.replied)
}

// copyHead copies the HTTP head of an upgrade request or response, up to
// and including the empty line.
func copyHead(r *bufio.Reader, w io.Writer) error {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
}
