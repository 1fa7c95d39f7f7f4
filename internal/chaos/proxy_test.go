package main

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// lineServer answers every line with "ok\n" and counts the lines it got:
// the commands that "ran".
func lineServer(t *testing.T) (addr string, ran *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ran = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					ran.Add(1)
					if _, err := c.Write([]byte("ok\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ran
}

// dialProxy starts a proxy to addr and connects to it.
func dialProxy(t *testing.T, addr string) (*proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	p, err := startProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, bufio.NewReader(c)
}

func TestProxyLosesTheReplyAfterTheCommandRan(t *testing.T) {
	addr, ran := lineServer(t)
	p, c, r := dialProxy(t, addr)
	if _, err := c.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "ok\n" {
		t.Fatalf("reply %q, %v", l, err)
	}
	p.LoseReplies(1)
	if _, err := c.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("read %q, %v; want EOF (the reply lost, the connection closed)", l, err)
	}
	if ran.Load() != 2 || p.drops.Load() != 1 {
		t.Fatalf("server ran %d commands, proxy lost %d replies; want 2 and 1", ran.Load(), p.drops.Load())
	}
}

func TestProxyPausesAndCuts(t *testing.T) {
	addr, ran := lineServer(t)
	p, c, r := dialProxy(t, addr)
	p.Pause()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a reply came through a paused proxy")
	}
	if ran.Load() != 0 {
		t.Fatal("a command reached the server through a paused proxy")
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || l != "ok\n" {
		t.Fatalf("after resume: %q, %v", l, err)
	}
	if n := p.Cut(); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	if _, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("after a cut: %v, want EOF", err)
	}
}
