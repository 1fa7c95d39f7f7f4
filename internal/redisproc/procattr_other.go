//go:build !linux

package redisproc

import "syscall"

// procAttr is nil where there is no parent-death signal: a server outlives
// a process killed before it stopped the server.
func procAttr() *syscall.SysProcAttr { return nil }
