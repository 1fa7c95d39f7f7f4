package script

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Bus lets the commands of one party (a consumer's acks) ride in the round
// trip of another's (its next fetch): a command sent through Carry waits a
// little for a command sent through Drive, which takes every waiting command
// along in one pipeline. A round trip costs Redis and the client a read and
// a write system call each, far more than a script call in it (on a 2-vCPU
// machine a lone PING costs Redis about 20 µs of CPU, one of two pipelined
// about 10): a busy consumer whose acks ride on its fetches halves its round
// trips.
//
// A command waits at most the time Carry was given, then goes alone; a
// command whose context ends while it waits is never sent. Each command gets
// its own reply or error, as if sent alone; when the round trip fails, every
// command in it gets the error (see Exec). All commands of a bus must be for
// one node (on a cluster: one hash slot).
type Bus struct {
	c   Client
	now func() time.Time

	mu      sync.Mutex
	waiting []*rider

	// Of the driving commands' callers (see Drove): whether the last one
	// said another comes soon, when (unix ns), and the mean gap between
	// such ones (ns, a moving average).
	soon    atomic.Bool
	lastAt  atomic.Int64
	meanGap atomic.Int64
}

// rider is a command waiting on a bus. taken is set, under the bus's lock,
// by the Drive that carries it; done is closed once its reply is in.
type rider struct {
	cmd   redis.Cmder
	taken bool
	done  chan struct{}
}

// NewBus returns a bus that sends through c.
func NewBus(c Client) *Bus { return &Bus{c: c, now: time.Now} }

// Carry returns a Processor whose commands wait up to wait for a Drive to
// take them along, and then go alone. With wait <= 0 it sends at once.
func (b *Bus) Carry(wait time.Duration) Processor {
	if wait <= 0 {
		return b.c
	}
	return carrier{b: b, wait: wait}
}

// MaxRide is the longest a command waits for a ride (see Ride).
const MaxRide = 5 * time.Millisecond

// Drove tells the bus that a driving command came back, and whether its
// caller expects to send the next one soon (a fetch that came back full: the
// queue has a backlog, so the consumer fetches again as soon as it has
// room).
func (b *Bus) Drove(soon bool) {
	now := b.now().UnixNano()
	if soon && b.soon.Load() {
		gap := now - b.lastAt.Load()
		if mean := b.meanGap.Load(); mean > 0 {
			gap = mean - mean/4 + gap/4
		}
		b.meanGap.Store(gap)
	} else if !soon {
		b.meanGap.Store(0)
	}
	b.lastAt.Store(now)
	b.soon.Store(soon)
}

// RideItems is the most items (deliveries to settle) a command that rides
// carries: a bigger batch shares its round trip among enough items already,
// and its caller, who sends one batch at a time, must not wait when items
// pile up faster than rides come.
const RideItems = 32

// Ride returns how long a command of items items may wait for the next
// driving command: twice the mean gap between the last ones, when the last
// said another comes soon, they come within MaxRide and items is at most
// RideItems; 0 (go at once) otherwise.
func (b *Bus) Ride(items int) time.Duration {
	mean := time.Duration(b.meanGap.Load())
	if items > RideItems || !b.soon.Load() || mean <= 0 || mean > MaxRide {
		return 0
	}
	return min(2*mean, MaxRide)
}

// Drive returns a Processor that sends each command at once, together with
// every command waiting on the bus, in one round trip.
func (b *Bus) Drive() Processor { return driver{b} }

type carrier struct {
	b    *Bus
	wait time.Duration
}

func (c carrier) Process(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		cmd.SetErr(err)
		return err
	}
	r := &rider{cmd: cmd, done: make(chan struct{})}
	b := c.b
	b.mu.Lock()
	b.waiting = append(b.waiting, r)
	b.mu.Unlock()
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case <-r.done:
		return cmd.Err()
	case <-t.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	if r.taken {
		b.mu.Unlock()
		<-r.done // on its way: its outcome is one round trip off
		return cmd.Err()
	}
	for i, w := range b.waiting {
		if w == r {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		cmd.SetErr(err) // never sent
		return err
	}
	return b.c.Process(ctx, cmd)
}

type driver struct{ b *Bus }

// Unwrap returns the client the bus sends through.
func (c carrier) Unwrap() Processor { return c.b.c }

// Unwrap returns the client the bus sends through.
func (d driver) Unwrap() Processor { return d.b.c }

// riderTimeout bounds a round trip that carries riders: it runs on past
// the driving command's context, which may end at any time (a fetch at
// shutdown), so that the riders' outcomes do not hang on it.
const riderTimeout = 10 * time.Second

func (d driver) Process(ctx context.Context, cmd redis.Cmder) error {
	_ = d.b.Send(ctx, cmd)
	return cmd.Err()
}

// Send sends cmds at once, together with every command waiting on the bus,
// in one round trip, and returns the first error (each command has its own,
// see Exec).
func (b *Bus) Send(ctx context.Context, cmds ...redis.Cmder) error {
	b.mu.Lock()
	rs := b.waiting
	b.waiting = nil
	for _, r := range rs {
		r.taken = true
	}
	b.mu.Unlock()
	if len(rs) == 0 && len(cmds) == 1 {
		return b.c.Process(ctx, cmds[0])
	}
	ctxErr := ctx.Err()
	if ctxErr != nil {
		// The driving commands are not sent; the riders still go.
		for _, cmd := range cmds {
			cmd.SetErr(ctxErr)
		}
		cmds = nil
		if len(rs) == 0 {
			return ctxErr
		}
	}
	pctx := ctx
	if len(rs) > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), riderTimeout)
		defer cancel()
	}
	p := b.c.Pipeline()
	for _, r := range rs {
		_ = p.Process(pctx, r.cmd)
	}
	for _, cmd := range cmds {
		_ = p.Process(pctx, cmd)
	}
	err := Exec(pctx, p)
	for _, r := range rs {
		close(r.done)
	}
	if ctxErr != nil {
		return ctxErr
	}
	return err
}
