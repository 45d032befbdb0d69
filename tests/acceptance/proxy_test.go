package acceptance_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to a target address. A test points a worker
// at it to lose the server's replies on purpose: after dropReplies, the
// connections open at that moment still carry the worker's frames to the
// server, but everything the server sends back is discarded, as when a
// server commits a completion and dies before its ack leaves the machine.
// Connections opened later are forwarded normally.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// proxyConn is one forwarded connection.
type proxyConn struct {
	client, server net.Conn
	drop           atomic.Bool // discard what the server sends
	once           sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

// startProxy listens on a loopback port and forwards to target until the
// test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's http URL.
func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			// The server is down: the client sees the connection close,
			// as it would see a refused connection.
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer c.close()
			_, _ = io.Copy(server, client)
		}()
		go func() {
			defer p.wg.Done()
			defer p.forget(c)
			defer c.close()
			p.reply(c)
		}()
	}
}

// reply copies what the server sends to the client until either side
// closes, discarding it once the connection drops replies.
func (p *proxy) reply(c *proxyConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 && !c.drop.Load() {
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) forget(c *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// dropReplies makes every connection open now discard what the server sends
// from here on; it returns how many connections it affected.
func (p *proxy) dropReplies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.drop.Store(true)
	}
	return len(p.conns)
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
