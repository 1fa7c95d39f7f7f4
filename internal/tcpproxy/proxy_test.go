package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// start starts a proxy to a new lineServer, closed when t ends.
func start(t *testing.T) (*Proxy, *atomic.Int64) {
	t.Helper()
	addr, ran := lineServer(t)
	p, err := Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, ran
}

// client is one connection through a proxy.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// write sends line without waiting for its reply.
func (c *client) write(line string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next reply, or the error of a read waiting within d.
func (c *client) read(d time.Duration) (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	return c.r.ReadString('\n')
}

// answered sends line and fails the test unless the server's reply comes.
func (c *client) answered(line string) {
	c.t.Helper()
	c.write(line)
	if l, err := c.read(5 * time.Second); err != nil || l != "ok\n" {
		c.t.Fatalf("%s: reply %q, %v; want ok", line, l, err)
	}
}

// lost sends line and fails the test unless the connection closes instead
// of the reply coming.
func (c *client) lost(line string) {
	c.t.Helper()
	c.write(line)
	if l, err := c.read(5 * time.Second); err != io.EOF {
		c.t.Fatalf("%s: read %q, %v; want EOF (the reply lost, the connection closed)", line, l, err)
	}
}

// counts fails the test unless the server ran ran commands and p lost lost
// replies.
func counts(t *testing.T, p *Proxy, ran *atomic.Int64, wantRan, wantLost int64) {
	t.Helper()
	if ran.Load() != wantRan || p.Lost() != wantLost {
		t.Fatalf("server ran %d commands, proxy lost %d replies; want %d and %d", ran.Load(), p.Lost(), wantRan, wantLost)
	}
}

func TestProxyLosesTheReplyAfterTheCommandRan(t *testing.T) {
	p, ran := start(t)
	c := dial(t, p)
	c.answered("one")
	p.LoseReplies(1)
	c.lost("two")
	counts(t, p, ran, 2, 1)
}

func TestProxyPausesAndCuts(t *testing.T) {
	p, ran := start(t)
	c := dial(t, p)
	p.Pause()
	c.write("held")
	if _, err := c.read(200 * time.Millisecond); err == nil {
		t.Fatal("a reply came through a paused proxy")
	}
	if ran.Load() != 0 {
		t.Fatal("a command reached the server through a paused proxy")
	}
	p.Resume()
	if l, err := c.read(5 * time.Second); err != nil || l != "ok\n" {
		t.Fatalf("after resume: %q, %v", l, err)
	}
	if n := p.Cut(); n != 1 || p.Cuts() != 1 {
		t.Fatalf("cut %d connections (%d in all), want 1", n, p.Cuts())
	}
	if _, err := c.read(5 * time.Second); err != io.EOF {
		t.Fatalf("after a cut: %v, want EOF", err)
	}
}

func TestProxyDropsTheNextReplyOnce(t *testing.T) {
	p, ran := start(t)
	p.DropNextReply()
	dial(t, p).lost("one")
	dial(t, p).answered("two") // disarmed
	counts(t, p, ran, 2, 1)
}

func TestProxyDropsTheReplyToTheCommandThatMatches(t *testing.T) {
	p, ran := start(t)
	c, other := dial(t, p), dial(t, p)
	p.DropReplyTo("receipt-7")
	other.answered("unrelated")
	c.lost("ack receipt-7")
	other.answered("again receipt-7") // disarmed
	counts(t, p, ran, 3, 1)
}
