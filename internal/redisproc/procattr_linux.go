package redisproc

import "syscall"

// procAttr makes the kernel SIGKILL the server when the process that
// started it dies, whatever ends it: a killed suite leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
