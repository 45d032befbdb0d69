//go:build unix && !linux

package mysqld

import "syscall"

// sysProcAttr puts the server in its own process group, so that a Ctrl-C in
// the terminal reaches only the parent, which then stops the server in order.
// Outside Linux there is no parent-death signal: a parent that crashes leaves
// the server running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
