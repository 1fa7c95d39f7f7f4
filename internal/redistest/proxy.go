package redistest

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/tcpproxy"
)

// Proxy forwards TCP connections to a server, and on demand loses one
// reply: the command reaches the server and runs, and the connection breaks
// before its answer reaches the client (what a client sees when a network
// or a server fails at the wrong moment).
type Proxy struct {
	Addr string
	p    *tcpproxy.Proxy
}

// StartProxy listens on a free loopback port and forwards each connection
// to target, until t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatalf("proxy: %v (a test's proxy listens on a free port of 127.0.0.1)", err)
	}
	t.Cleanup(p.Close)
	return &Proxy{Addr: p.Addr(), p: p}
}

// DropNextReply arms the proxy: the next bytes any server connection sends
// are thrown away and that connection is closed on both sides.
func (p *Proxy) DropNextReply() { p.p.DropNextReply() }

// DropReplyTo arms the proxy to lose the reply to the next command whose
// bytes contain s (a receipt, a key), whatever other commands the client
// sends meanwhile on other connections.
func (p *Proxy) DropReplyTo(s string) { p.p.DropReplyTo(s) }

// Lost is how many replies the proxy has lost.
func (p *Proxy) Lost() int64 { return p.p.Lost() }

// Pause holds every byte in both directions until Resume: to the server,
// the client is still connected; to the client, the server stopped
// answering (what a process that froze, or a network that dropped every
// packet, looks like).
func (p *Proxy) Pause() { p.p.Pause() }

// Resume lets held bytes through.
func (p *Proxy) Resume() { p.p.Resume() }

// Cut closes every connection through the proxy, both ends; bytes a Pause
// held for them are thrown away.
func (p *Proxy) Cut() { p.p.Cut() }
