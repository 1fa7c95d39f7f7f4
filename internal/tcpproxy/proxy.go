package tcpproxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards every connection it accepts to its target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*link]struct{}
	paused chan struct{} // non-nil while paused; closed on resume
	match  []byte        // armed by DropReplyTo
	closed bool

	dropNext  atomic.Bool  // armed by DropNextReply
	dropOneIn atomic.Int64 // set by LoseReplies

	cuts  atomic.Int64
	drops atomic.Int64
}

// link is one client connection and its connection to the server.
type link struct {
	client, server net.Conn
	once           sync.Once
	dropNext       atomic.Bool // a command on it matched DropReplyTo
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// Start listens on a free loopback port and forwards to target until
// Close.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		go p.pipe(l, c, s, false)
		go p.pipe(l, s, c, true)
	}
}

// pipe copies from src to dst until either end closes. replies says src is
// the server, whose bytes may be lost.
func (p *Proxy) pipe(l *link, src, dst net.Conn, replies bool) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitResumed(l) {
				return
			}
			if !replies && p.matched(buf[:n]) {
				l.dropNext.Store(true)
			}
			if replies && p.lose(l) {
				// The server ran the command(s) this replies to; the
				// client never learns so.
				p.drops.Add(1)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed link: close both ends
		}
	}
}

// lose reports whether the reply l's server just sent is to be lost.
func (p *Proxy) lose(l *link) bool {
	if l.dropNext.Load() || p.dropNext.CompareAndSwap(true, false) {
		return true
	}
	k := p.dropOneIn.Load()
	return k > 0 && rand.Int64N(k) == 0
}

// matched reports whether chunk holds the pattern DropReplyTo armed,
// disarming it.
func (p *Proxy) matched(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.match == nil || !bytes.Contains(chunk, p.match) {
		return false
	}
	p.match = nil
	return true
}

// waitResumed blocks while the proxy is paused; false when the link was
// closed meanwhile.
func (p *Proxy) waitResumed(l *link) bool {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch == nil {
		return true
	}
	<-ch
	p.mu.Lock()
	_, alive := p.conns[l]
	p.mu.Unlock()
	return alive
}

// Cut closes every open connection, both ends, and returns how many it
// closed; new ones are accepted.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	p.cuts.Add(int64(len(ls)))
	return len(ls)
}

// Pause holds every byte in both directions until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume lets held bytes through.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
	p.mu.Unlock()
}

// LoseReplies loses each reply with probability 1/oneIn (0: none): the
// reply's connection is closed instead.
func (p *Proxy) LoseReplies(oneIn int64) { p.dropOneIn.Store(oneIn) }

// DropNextReply loses the next reply on any connection: the server's bytes
// are thrown away and that connection is closed on both sides.
func (p *Proxy) DropNextReply() { p.dropNext.Store(true) }

// DropReplyTo arms the proxy to lose the reply to the next command whose
// bytes contain s (a receipt, a key), whatever other commands clients send
// meanwhile on other connections.
func (p *Proxy) DropReplyTo(s string) {
	p.mu.Lock()
	p.match = []byte(s)
	p.mu.Unlock()
}

// Cuts is how many connections Cut has closed.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Lost is how many replies the proxy has lost.
func (p *Proxy) Lost() int64 { return p.drops.Load() }

// Close stops accepting, resumes and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Resume()
	p.Cut()
}
