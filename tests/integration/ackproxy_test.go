package integration_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// ackDropper forwards TCP connections to an Orbit server and reads the
// WebSocket frames a client sends. The first event.ack it sees is never
// forwarded: the connection is cut at once in both directions, so the
// client gets no answer and the server never records the ACK, and from
// then on every new connection is closed as soon as it is accepted: the
// client cannot reach the server again. (Frames the server sends are
// forwarded untouched; plain HTTP requests pass through.)
type ackDropper struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	cut    chan struct{} // closed when the ack was dropped

	mu     sync.Mutex
	armed  bool
	conns  map[net.Conn]struct{}
	closed bool
}

// startAckDropper listens on a loopback port and forwards to target (a
// host:port) until the test ends.
func startAckDropper(t *testing.T, target string) *ackDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackDropper{ln: ln, target: target, armed: true, cut: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's http URL.
func (p *ackDropper) URL() string { return "http://" + p.ln.Addr().String() }

func (p *ackDropper) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		select {
		case <-p.cut:
			client.Close() // the server is out of reach for good
			continue
		default:
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
		go p.upstream(client, server)
		go func() {
			defer p.wg.Done()
			io.Copy(client, server)
			client.Close()
		}()
	}
}

// upstream forwards the client's request and, on a WebSocket, its frames,
// until the first event.ack, which it drops, cutting the connection.
func (p *ackDropper) upstream(client, server net.Conn) {
	defer p.wg.Done()
	defer server.Close()
	defer client.Close()
	r := bufio.NewReader(client)
	head, err := readHead(r)
	if err != nil {
		return
	}
	if _, err := server.Write(head); err != nil {
		return
	}
	if !bytes.Contains(bytes.ToLower(head), []byte("upgrade: websocket")) {
		io.Copy(server, r)
		return
	}
	for {
		raw, payload, err := wstest.ReadWireFrame(r)
		if err != nil {
			return
		}
		var f struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(payload, &f) == nil && f.Type == "event.ack" && p.arm() {
			close(p.cut)
			return // both sides are closed by the defers
		}
		if _, err := server.Write(raw); err != nil {
			return
		}
	}
}

// arm reports whether this ack is the one to drop: the first.
func (p *ackDropper) arm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.armed
	p.armed = false
	return was
}

// track records connections for close; it reports false once the proxy
// is closed.
func (p *ackDropper) track(conns ...net.Conn) bool {
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
func (p *ackDropper) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// readHead reads the HTTP head of a request, up to and including the empty
// line.
func readHead(r *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		head = append(head, line...)
		if len(line) <= 2 {
			return head, nil
		}
	}
}
