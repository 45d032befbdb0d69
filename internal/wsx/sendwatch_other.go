//go:build !linux

package wsx

import (
	"net"
	"time"
)

// sendWatch is Linux only. Elsewhere a client that stops reading is ended
// by the write timeout once the kernel's send buffer is full, or by the
// idle timeout.
type sendWatch struct{}

func newSendWatch(net.Conn) *sendWatch { return nil }

func (*sendWatch) stalledFor(time.Time) time.Duration { return 0 }
