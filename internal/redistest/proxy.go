package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a server, and on demand loses one
// reply: the command reaches the server and runs, and the connection breaks
// before its answer reaches the client (what a client sees when a network
// or a server fails at the wrong moment).
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	drop   atomic.Bool
	mu     sync.Mutex
	match  []byte // armed by DropReplyTo; guarded by mu
	conns  []net.Conn
}

// StartProxy listens on a free loopback port and forwards each connection
// to target, until t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

// DropNextReply arms the proxy: the next bytes any server connection sends
// are thrown away and that connection is closed on both sides.
func (p *Proxy) DropNextReply() { p.drop.Store(true) }

// DropReplyTo arms the proxy to lose the reply to the next command whose
// bytes contain s (a receipt, a key), whatever other commands the client
// sends meanwhile on other connections.
func (p *Proxy) DropReplyTo(s string) {
	p.mu.Lock()
	p.match = []byte(s)
	p.mu.Unlock()
}

// matched reports whether chunk holds the armed pattern, disarming it.
func (p *Proxy) matched(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.match == nil || !bytes.Contains(chunk, p.match) {
		return false
	}
	p.match = nil
	return true
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var dropNext atomic.Bool
		go p.commands(client, server, &dropNext)
		go p.replies(server, client, &dropNext)
	}
}

func (p *Proxy) commands(client, server net.Conn, dropNext *atomic.Bool) {
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if p.matched(buf[:n]) {
				dropNext.Store(true)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) replies(server, client net.Conn, dropNext *atomic.Bool) {
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if dropNext.Load() || p.drop.CompareAndSwap(true, false) {
				return // the reply is lost with the connection
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
