//go:build chaos

package chaos_test

import (
	"net"
	"sync"
	"testing"
)

// faultProxy forwards TCP connections from a client process to the orbit
// server and can, on demand, hold what the client sends (its frames reach
// the server later, or never if the connection is closed first) or stall
// the client's socket: it stops reading what the server sends, so the
// server's writes pile up in the kernel's buffers and then block, as with
// a client that stopped reading.
type faultProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	changed  *sync.Cond
	holdUp   bool // do not forward client → server
	stallDn  bool // do not read server → client
	conns    map[*proxyPair]struct{}
	closed   bool
	accepted int
}

// proxyPair is one forwarded connection.
type proxyPair struct {
	client, server net.Conn
	once           sync.Once
}

func (c *proxyPair) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

// startFaultProxy listens on a loopback port and forwards to target (a
// host:port) until the test ends.
func startFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[*proxyPair]struct{}{}}
	p.changed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's http URL.
func (p *faultProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close() // the server is down: as a refused connection
			continue
		}
		c := &proxyPair{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, c.client, c.server, func() bool { return p.holdUp })
		go p.pipe(c, c.server, c.client, func() bool { return p.stallDn })
	}
}

// pipe copies from → to until either side closes. While paused() holds
// it neither reads nor writes.
func (p *faultProxy) pipe(c *proxyPair, from, to net.Conn, paused func() bool) {
	defer p.wg.Done()
	defer p.forget(c)
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		if !p.wait(c, paused) {
			return
		}
		n, err := from.Read(buf)
		if n > 0 {
			if !p.wait(c, paused) {
				return
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while paused() holds; it reports false once the connection
// or the proxy is closed.
func (p *faultProxy) wait(c *proxyPair, paused func() bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if _, open := p.conns[c]; !open || p.closed {
			return false
		}
		if !paused() {
			return true
		}
		p.changed.Wait()
	}
}

func (p *faultProxy) forget(c *proxyPair) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	p.changed.Broadcast()
}

// hold stops (on) or resumes (off) forwarding what clients send.
func (p *faultProxy) hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUp = on
	p.changed.Broadcast()
}

// stall stops (on) or resumes (off) reading what the server sends.
func (p *faultProxy) stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallDn = on
	p.changed.Broadcast()
}

// cut closes every connection open now, with whatever it holds, and lifts
// hold and stall for the connections that come next.
func (p *faultProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.close()
		delete(p.conns, c)
	}
	p.holdUp, p.stallDn = false, false
	p.changed.Broadcast()
	return n
}

// acceptedCount returns how many connections the proxy has accepted.
func (p *faultProxy) acceptedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.changed.Broadcast()
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
