package main

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// proxy is a loopback TCP proxy between Redis clients and one Redis server
// that can break the path the way networks do: cut every connection at once
// (both ends see it closed), pause all traffic (bytes wait, nothing is
// closed, as in a partition), and lose replies: forward a command to Redis,
// let it run, then close the client's connection instead of delivering the
// reply.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*link]struct{}
	paused chan struct{} // non-nil while paused; closed on resume
	closed bool

	// dropOneIn, when positive, loses each reply with probability
	// 1/dropOneIn: the reply's connection is closed instead.
	dropOneIn atomic.Int64

	cuts  atomic.Int64 // connections cut by cut
	drops atomic.Int64 // replies lost
}

// link is one client connection and its connection to Redis.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// startProxy listens on a free loopback port and forwards to target.
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
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
// Redis, whose bytes may be lost.
func (p *proxy) pipe(l *link, src, dst net.Conn, replies bool) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitResumed(l) {
				return
			}
			if replies {
				if k := p.dropOneIn.Load(); k > 0 && rand.Int64N(k) == 0 {
					// Redis ran the command(s) this replies to; the client
					// never learns so.
					p.drops.Add(1)
					return
				}
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

// waitResumed blocks while the proxy is paused; false when the link was
// closed meanwhile.
func (p *proxy) waitResumed(l *link) bool {
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

// Cut closes every open connection, both ends; new ones are accepted.
func (p *proxy) Cut() int {
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
func (p *proxy) Pause() {
	p.mu.Lock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume lets held bytes through.
func (p *proxy) Resume() {
	p.mu.Lock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
	p.mu.Unlock()
}

// LoseReplies loses each reply with probability 1/oneIn (0: none).
func (p *proxy) LoseReplies(oneIn int64) { p.dropOneIn.Store(oneIn) }

// Close stops accepting, resumes and closes every connection.
func (p *proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Resume()
	p.Cut()
}
