package netproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reports whether it came back within wait.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) bool {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if err != nil {
		return false
	}
	if got != line+"\n" {
		t.Fatalf("read %q, want %q", got, line)
	}
	return true
}

func TestProxyForwardsHoldsDropsAndCuts(t *testing.T) {
	p := Start(t, echo(t))
	c, r := dial(t, p)
	if !roundTrip(t, c, r, "one", 5*time.Second) {
		t.Fatal("no echo through the proxy")
	}
	if n := p.Accepted(); n != 1 {
		t.Fatalf("accepted %d connections, want 1", n)
	}

	p.Hold(true)
	if roundTrip(t, c, r, "two", 200*time.Millisecond) {
		t.Fatal("a held line reached the server")
	}
	p.Hold(false)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the hold was lifted: read %q, %v; want the held line", got, err)
	}
	c.SetReadDeadline(time.Time{})

	if n := p.DropReplies(); n != 1 {
		t.Fatalf("DropReplies affected %d connections, want 1", n)
	}
	if roundTrip(t, c, r, "four", 200*time.Millisecond) {
		t.Fatal("a reply reached the client after DropReplies")
	}
	c2, r2 := dial(t, p)
	if !roundTrip(t, c2, r2, "five", 5*time.Second) {
		t.Fatal("a new connection is not forwarded after DropReplies")
	}

	if n := p.Cut(); n != 2 {
		t.Fatalf("Cut closed %d connections, want 2", n)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r2.ReadString('\n'); err == nil {
		t.Fatal("a cut connection is still open")
	}
}

func TestProxyFallsBackWhenTheTargetRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	p := Start(t, down, echo(t))
	c, r := dial(t, p)
	if !roundTrip(t, c, r, "hello", 5*time.Second) {
		t.Fatal("a connection the target refused did not reach the fallback")
	}

	alone := Start(t, down)
	c, r = dial(t, alone)
	c.Write([]byte("hello\n"))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("without a fallback, a refused connection was answered")
	}
}
