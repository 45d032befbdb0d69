//go:build linux

package wsx

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sendWatch tells whether the client has stopped taking data. A write ends
// as soon as the kernel has the bytes, and the kernel's send buffer takes
// megabytes, so a client that stops reading makes no write block for a
// long time; the TCP counters show it at once: data waits and none of it is
// acknowledged.
type sendWatch struct {
	rc      syscall.RawConn
	acked   uint64    // bytes the client had acknowledged at the last look
	waiting time.Time // since when data has waited without progress; zero when none waits
}

// newSendWatch returns the watch of the TCP connection under c, or nil
// when there is none.
func newSendWatch(c net.Conn) *sendWatch {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &sendWatch{rc: rc}
}

// stalledFor returns how long data has waited for the client at now
// without the client acknowledging any of it; 0 when nothing waits or the
// counters cannot be read. It is called by one goroutine, a few times per
// write timeout; each call is one getsockopt.
func (w *sendWatch) stalledFor(now time.Time) time.Duration {
	if w == nil {
		return 0
	}
	var info *unix.TCPInfo
	err := w.rc.Control(func(fd uintptr) {
		info, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || info == nil {
		return 0
	}
	switch {
	case info.Unacked == 0 && info.Notsent_bytes == 0:
		w.waiting = time.Time{}
	case w.waiting.IsZero() || info.Bytes_acked != w.acked:
		w.waiting = now
	}
	w.acked = info.Bytes_acked
	if w.waiting.IsZero() {
		return 0
	}
	return now.Sub(w.waiting)
}
