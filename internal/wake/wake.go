// Package wake lets idle consumers of a fleet sleep in Redis until there is
// work, so that one unit of work wakes one of them, not all.
//
// A signal is a sorted set holding at most one member: Signal adds it (a
// no-op when it is there) and each waiter blocks in BZPOPMIN on it, which
// hands the member to exactly one waiter; the others sleep on. The waiter
// that took it, when it finds more work than it can take, signals again, so
// that the next one wakes (a chain, one waiter per batch). A signal left
// when no one waited costs the next waiter one look that finds nothing.
//
// A waiter's blocking command also watches a key of its own, so that a
// waiter that gives up (its context ended) can end its own command at once,
// with one ZADD, instead of leaving it blocked on a connection of the
// caller's pool until its timeout.
package wake

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/script"
)

// Member is the one member of a signal.
const Member = "w"

// cancelTTL bounds the life of a waiter's own key when its command ended
// before the cancel reached it.
const cancelTTL = 10 * time.Second

// Signal adds the signal's member to key (ZADD key 0 w): the longest
// waiting Waiter on key wakes; with none waiting the next one to wait wakes
// at once. Scripts do the same with redis.call('ZADD', key, 0, 'w').
func Signal(ctx context.Context, rdb redis.Cmdable, key string) error {
	return rdb.ZAdd(ctx, key, redis.Z{Member: Member}).Err()
}

//go:embed lua/signal_if.lua
var signalIfLua string

var signalIfScript = script.New("wake.signal_if", signalIfLua)

// SignalIf is Signal on key when work exists (one script call): for a
// wake-up handed back, which should wake no one once the work is gone and
// must not bring back the signal of a deleted queue.
func SignalIf(ctx context.Context, rdb script.Processor, work, key string) error {
	_, err := signalIfScript.Run(ctx, rdb, []string{work, key})
	return err
}

// SignalFor is Signal on a key that expires after ttl (ZADD and PEXPIRE in
// one round trip): for a signal that may be sent when no one waits and must
// not outlive that.
func SignalFor(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration) error {
	p := rdb.Pipeline()
	p.ZAdd(ctx, key, redis.Z{Member: Member})
	p.PExpire(ctx, key, ttl)
	_, err := p.Exec(ctx)
	return err
}

// Needs are the commands a signal on key and its waiters send (see
// redischeck), scripts aside.
func Needs(key string) []redischeck.Need {
	cancel := key + ":cancel:probe"
	return []redischeck.Need{
		redischeck.Key(key, "ZADD", key, "0", Member),
		redischeck.Key(key, "DEL", key),
		redischeck.Key(key, "BZPOPMIN", key, cancel, "0.001"),
		redischeck.Key(cancel, "PEXPIRE", cancel, "1"),
		redischeck.Key(cancel, "DEL", cancel),
	}
}

// Waiter waits on one signal key, or on several. Waits may run one at a
// time.
type Waiter struct {
	rdb    redis.UniversalClient
	key    string
	keys   []string // key, the others, then cancel: BZPOPMIN's keys
	cancel string
}

// NewWaiter returns a waiter on key and the signals also (on a cluster, in
// key's slot). Its own key is key + ":cancel:" + a random name, in key's
// cluster slot when key has a hash tag.
func NewWaiter(rdb redis.UniversalClient, key string, also ...string) *Waiter {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	w := &Waiter{rdb: rdb, key: key, cancel: key + ":cancel:" + hex.EncodeToString(b[:])}
	w.keys = append(append([]string{key}, also...), w.cancel)
	return w
}

// Key returns the signal key.
func (w *Waiter) Key() string { return w.key }

// Wait blocks until the signal's member is taken by this waiter (true), d
// passes (false), or ctx ends (ctx.Err()). d is cut to what ctx's deadline
// leaves, so that a wait that times out leaves no command blocked behind
// it, rounded down to whole milliseconds, and is at least one. When ctx ends first the blocked
// command is ended with a ZADD to the waiter's own key; a member it took
// meanwhile is given back (Signal), so that no wake-up is lost.
func (w *Waiter) Wait(ctx context.Context, d time.Duration) (bool, error) {
	key, err := w.WaitFor(ctx, d)
	return key == w.key, err
}

// WaitOpen is WaitFor cut short also when closing (a consumer's close)
// ends: it returns ctx.Err() when ctx ended, broker.ErrClosed when closing
// did, other errors as WaitFor returns them.
func (w *Waiter) WaitOpen(ctx, closing context.Context, d time.Duration) (string, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(closing, cancel)
	defer stop()
	key, err := w.WaitFor(wctx, d)
	switch {
	case err == nil:
		return key, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case closing.Err() != nil:
		return "", broker.ErrClosed
	}
	return "", err
}

// WaitFor is Wait on every signal of the waiter: it returns the signal key
// whose member it took, "" when d passed (or ctx ended, with ctx.Err()).
func (w *Waiter) WaitFor(ctx context.Context, d time.Duration) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	d = max(d.Truncate(time.Millisecond), time.Millisecond)
	type result struct {
		key string
		err error
	}
	res := make(chan result, 1)
	go func() {
		// Its own context: ending ctx must not abandon the command mid-read
		// (go-redis would then drop the connection, and the member the
		// command took with it).
		key, err := w.block(d)
		res <- result{key: key, err: err}
	}()
	select {
	case r := <-res:
		return w.outcome(r.key, r.err)
	case <-ctx.Done():
	}
	bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cut := !errors.Is(ctx.Err(), context.DeadlineExceeded)
	if cut {
		// Cancelled: cut the command short, then wait for it (Redis
		// answers it at once). A deadline needs no cut: d ends with it.
		p := w.rdb.Pipeline()
		p.ZAdd(bg, w.cancel, redis.Z{Member: Member})
		p.PExpire(bg, w.cancel, cancelTTL)
		_, _ = p.Exec(bg) // if this fails the command ends at its timeout
	}
	select {
	case r := <-res:
		if r.err == nil && r.key != w.cancel && r.key != "" {
			_ = Signal(bg, w.rdb, r.key) // it took a wake-up meant for another
		}
		if cut {
			_ = w.rdb.Del(bg, w.cancel).Err()
		}
	case <-bg.Done():
	}
	return "", ctx.Err()
}

// block runs BZPOPMIN on the signal and the waiter's own key for d and
// returns the key it popped from.
func (w *Waiter) block(d time.Duration) (string, error) {
	ctx := context.Background()
	if d >= time.Second {
		// The helper sets the socket's read deadline to cover the wait;
		// it takes whole seconds only.
		z, err := w.rdb.BZPopMin(ctx, d.Truncate(time.Second), w.keys...).Result()
		if err != nil {
			return "", err
		}
		return z.Key, nil
	}
	// Under a second the client's read timeout covers the wait.
	args := make([]any, 0, len(w.keys)+2)
	args = append(args, "BZPOPMIN")
	for _, k := range w.keys {
		args = append(args, k)
	}
	v, err := w.rdb.Do(ctx, append(args, strconv.FormatFloat(d.Seconds(), 'f', 3, 64))...).Slice()
	if err != nil {
		return "", err
	}
	if len(v) != 3 {
		return "", fmt.Errorf("BZPOPMIN replied %v", v)
	}
	key, _ := v[0].(string)
	return key, nil
}

func (w *Waiter) outcome(key string, err error) (string, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("wait on %s: %w", w.key, err)
	case key == w.cancel:
		return "", nil // a cut that came after the command's own end
	}
	return key, nil
}
