// Package netproxy holds a TCP proxy for tests that put faults between an
// Orbit client (a worker, a consumer) and the server: it can hold what
// clients send, stop reading what the server sends, discard the server's
// replies, or cut the connections. Production code never imports it.
package netproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from clients to a target address.
type Proxy struct {
	ln      net.Listener
	targets []string // the target, then its fallbacks
	wg      sync.WaitGroup

	mu       sync.Mutex
	changed  *sync.Cond
	holdUp   bool // do not forward client → server
	stallDn  bool // do not read server → client
	conns    map[*pair]struct{}
	closed   bool
	accepted int
}

// pair is one forwarded connection.
type pair struct {
	client, server net.Conn
	drop           atomic.Bool // discard what the server sends
	once           sync.Once
}

func (c *pair) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

// Start listens on a loopback port and forwards to target (a host:port)
// until the test ends. A connection that target refuses goes to the first
// of fallbacks that accepts it, as a load balancer moves clients off a
// server that died.
func Start(t testing.TB, target string, fallbacks ...string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, targets: append([]string{target}, fallbacks...), conns: map[*pair]struct{}{}}
	p.changed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's http URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := p.dial()
		if err != nil {
			// Every server is down: the client sees the connection
			// close, as it would see a refused connection.
			client.Close()
			continue
		}
		c := &pair{client: client, server: server}
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
		go p.pipe(c, c.client, c.server, func() bool { return p.holdUp }, nil)
		go p.pipe(c, c.server, c.client, func() bool { return p.stallDn }, &c.drop)
	}
}

// dial connects to the first target that accepts.
func (p *Proxy) dial() (net.Conn, error) {
	var err error
	for _, target := range p.targets {
		var c net.Conn
		if c, err = net.Dial("tcp", target); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// pipe copies from → to until either side closes. While paused() holds
// (read under the proxy's lock) it neither reads nor writes; while drop
// is set it reads and discards.
func (p *Proxy) pipe(c *pair, from, to net.Conn, paused func() bool, drop *atomic.Bool) {
	defer p.wg.Done()
	defer p.forget(c)
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		if !p.wait(c, paused) {
			return
		}
		n, err := from.Read(buf)
		if n > 0 && (drop == nil || !drop.Load()) {
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
func (p *Proxy) wait(c *pair, paused func() bool) bool {
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

func (p *Proxy) forget(c *pair) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	p.changed.Broadcast()
}

// Hold stops (on) or resumes (off) forwarding what clients send: it
// reaches the server later, or never if the connection is closed first.
func (p *Proxy) Hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUp = on
	p.changed.Broadcast()
}

// Stall stops (on) or resumes (off) reading what the server sends, so the
// server's writes pile up in the kernel's buffers and then block, as with
// a client that stopped reading.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallDn = on
	p.changed.Broadcast()
}

// DropReplies makes every connection open now discard what the server
// sends from here on, while it still carries the client's frames to the
// server, as when a server commits a change and dies before its reply
// leaves the machine. Connections opened later are forwarded normally. It
// returns how many connections it affected.
func (p *Proxy) DropReplies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.drop.Store(true)
	}
	return len(p.conns)
}

// Cut closes every connection open now, with whatever it holds, and lifts
// Hold and Stall for the connections that come next. It returns how many
// connections it closed.
func (p *Proxy) Cut() int {
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

// Accepted returns how many connections the proxy has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines. The test's cleanup calls it.
func (p *Proxy) Close() {
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
