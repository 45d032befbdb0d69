package server

import (
	"net"
	"sync"
)

// limitListener accepts at most cap(sem) open connections at once; Accept
// waits for one to close, so that excess clients wait in the kernel's
// backlog instead of costing the node a goroutine and buffers each. Like
// golang.org/x/net/netutil.LimitListener, without the dependency.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// newLimitListener returns ln bounded to n open connections.
func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

// Close closes the listener and ends waiting Accept calls.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when it is first closed, hijacked
// WebSocket connections included.
type limitConn struct {
	net.Conn
	releaseOnce sync.Once
	release     func()
}

// Close closes the connection and frees its slot.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(c.release)
	return err
}

// NetConn returns the accepted connection, as tls.Conn's NetConn does, for
// code that sets socket options.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

var _ net.Listener = (*limitListener)(nil)
