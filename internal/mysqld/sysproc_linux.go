package mysqld

import "syscall"

// sysProcAttr puts the server in its own process group, so that a Ctrl-C in
// the terminal reaches only the parent, which then stops the server in order,
// and asks the kernel to kill the server when the parent dies, so that a
// crashed test binary leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
