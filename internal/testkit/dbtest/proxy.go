// Package dbtest holds test-only tools for faults between Orbit and MySQL.
// Production code never imports it.
package dbtest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// CutMode says where CommitCutter breaks the connection that sends COMMIT.
type CutMode int

const (
	// CutBeforeCommit closes the connection without passing COMMIT on: the
	// server rolls the transaction back.
	CutBeforeCommit CutMode = iota + 1

	// CutAfterCommit passes COMMIT on and drops the server's reply: the
	// transaction is committed, but the client cannot know.
	CutAfterCommit
)

// comQuery is the MySQL protocol command byte of a text query.
const comQuery = 0x03

// CommitCutter is a TCP proxy to a MySQL server that, once armed, breaks the
// first connection that sends COMMIT. The client then sees a lost
// connection during COMMIT, whichever way the server decided.
type CommitCutter struct {
	t        testing.TB
	target   *mysql.Config // where to connect: Net and Addr
	listener net.Listener

	mu    sync.Mutex
	mode  CutMode       // zero when not armed
	done  chan struct{} // closed when the armed cut has happened
	conns map[net.Conn]bool

	wg sync.WaitGroup
}

// NewCommitCutter starts a proxy on 127.0.0.1 to the server of dsn and
// stops it when the test ends. Point a pool at it with DSN.
func NewCommitCutter(t testing.TB, dsn string) *CommitCutter {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	c := &CommitCutter{t: t, target: cfg, listener: l, conns: make(map[net.Conn]bool)}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(c.close)
	return c
}

// DSN returns dsn with its address replaced by the proxy's.
func (c *CommitCutter) DSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		c.t.Fatalf("dbtest: %v", err)
	}
	cfg.Net = "tcp"
	cfg.Addr = c.listener.Addr().String()
	cfg.TLSConfig = "false"
	return cfg.FormatDSN()
}

// CutNextCommit arms the proxy: the next COMMIT on any connection is cut as
// mode says. The returned channel is closed once the cut is complete; with
// CutAfterCommit that is after the server has answered, so the commit is
// visible to other connections.
func (c *CommitCutter) CutNextCommit(mode CutMode) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mode = mode
	c.done = make(chan struct{})
	return c.done
}

// CutAll breaks every connection the proxy carries at this moment, as a
// network failure between Orbit and MySQL would: a connection in the middle
// of a transaction loses it (the server rolls it back), one waiting for a
// reply never gets it. New connections are forwarded as before. It returns
// how many connections it broke.
func (c *CommitCutter) CutAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for conn := range c.conns {
		conn.Close()
		n++
	}
	// Each forwarded connection is a pair: the client's and the server's.
	return n / 2
}

// take disarms the proxy and returns the mode and signal of the cut, if it
// was armed.
func (c *CommitCutter) take() (CutMode, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mode, done := c.mode, c.done
	c.mode, c.done = 0, nil
	return mode, done
}

func (c *CommitCutter) accept() {
	defer c.wg.Done()
	for {
		client, err := c.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(c.target.Net, c.target.Addr)
		if err != nil {
			client.Close()
			continue
		}
		if !c.track(client, server) {
			return
		}
		c.wg.Add(2)
		reply := make(chan struct{})
		go c.clientToServer(client, server, reply)
		go c.serverToClient(server, client, reply)
	}
}

// track records a connection pair so close can end it; it reports false
// when the proxy is closing.
func (c *CommitCutter) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		for _, conn := range conns {
			conn.Close()
		}
		return false
	}
	for _, conn := range conns {
		c.conns[conn] = true
	}
	return true
}

// untrack forgets a closed connection pair.
func (c *CommitCutter) untrack(conns ...net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range conns {
		delete(c.conns, conn)
	}
}

// clientToServer passes packets on, watching for COMMIT. After a cut in
// CutAfterCommit mode, it signals done once serverToClient has seen the
// reply, which closes reply.
func (c *CommitCutter) clientToServer(client, server net.Conn, reply chan struct{}) {
	defer c.wg.Done()
	defer server.Close()
	defer client.Close()
	for {
		packet, err := readPacket(client)
		if err != nil {
			return
		}
		if isCommit(packet) {
			if mode, done := c.take(); mode != 0 {
				client.Close() // the reply, if any, never reaches the client
				if mode == CutAfterCommit {
					if _, err := server.Write(packet); err == nil {
						<-reply
					}
				}
				close(done)
				return
			}
		}
		if _, err := server.Write(packet); err != nil {
			return
		}
	}
}

// serverToClient passes bytes on unchanged and closes reply when the server
// sent something the client could not get, or the connection ended.
func (c *CommitCutter) serverToClient(server, client net.Conn, reply chan struct{}) {
	defer c.wg.Done()
	defer c.untrack(client, server)
	defer close(reply)
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readPacket reads one protocol packet, header included. Continuation
// packets of a payload of 16 MiB or more are read as packets of their own;
// they cannot be mistaken for a command because they do not start one with
// sequence number 0.
func readPacket(r io.Reader) ([]byte, error) {
	var header [4]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := int(header[0]) | int(header[1])<<8 | int(header[2])<<16
	packet := make([]byte, 4+n)
	copy(packet, header[:])
	if _, err := io.ReadFull(r, packet[4:]); err != nil {
		return nil, err
	}
	return packet, nil
}

// isCommit reports whether packet is the text query COMMIT, which is what
// database/sql's Tx.Commit sends through go-sql-driver/mysql.
func isCommit(packet []byte) bool {
	if len(packet) < 5 || packet[3] != 0 || packet[4] != comQuery {
		return false
	}
	return bytes.EqualFold(bytes.TrimSpace(packet[5:]), []byte("COMMIT"))
}

// close stops accepting, ends every connection and waits for the proxy's
// goroutines.
func (c *CommitCutter) close() {
	c.listener.Close()
	c.mu.Lock()
	for conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
	c.mu.Unlock()
	c.wg.Wait()
}
