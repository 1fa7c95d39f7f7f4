// Package elect picks one candidate out of a fleet to do a job that one
// process should do for all (a queue's upkeep), with a lease in Redis that
// the holder renews; another candidate takes over within a second of the
// holder's death, and at once when it resigns.
//
// What an election costs Redis does not grow with the number of candidates
// past the first three:
//
//   - the leader renews its lease every Renew (one SET per renewal);
//   - one heir, itself elected by a longer lease, polls the leader's lease
//     every Renew and takes it when it is gone (one SET NX per poll, and one
//     SET renewing the heir's own lease every fourth poll);
//   - every other candidate (a standby) sleeps in Redis on the heir's
//     baton (internal/wake) for StandbyEvery, jittered, then tries for the
//     heir's lease and the leader's (one BZPOPMIN and two SET NX): with 200
//     candidates and the default minute, about 10 commands per second for
//     the whole fleet.
//     When the heir's seat falls empty (the heir became leader or resigned;
//     the leader checks every 20 renewals whether the heir died), the
//     baton wakes one standby, which takes it.
//
// The lease is a liveness device, not a lock: for a moment after a holder
// stalls past its lease (a long pause, a lost reply), two candidates may both
// act as leader. It suits jobs that are safe when done twice, such as
// promoting timers and handing back expired leases, whose scripts move each
// message once whoever runs them.
package elect

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/logs"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/wake"
)

// Defaults of Config.
const (
	DefaultTTL          = 750 * time.Millisecond
	DefaultRenew        = 200 * time.Millisecond
	DefaultHeirTTL      = 3 * time.Second
	DefaultStandbyEvery = time.Minute

	// heirCheck is how many renewals apart the leader looks for an heir.
	heirCheck = 20
)

//go:embed lua/resign.lua
var resignLua string

var resignScript = script.New("elect.resign", resignLua)

// Config sets an election's keys and timings. Lease and Heir are required;
// zero durations take the defaults.
type Config struct {
	// Lease is the leader's lease key; Heir the heir's, and Heir+":baton"
	// the standbys' wake-up (internal/wake). On a cluster Lease may live in
	// another slot than Heir.
	Lease, Heir string
	// TTL is the leader's lease: a leader that dies is replaced within
	// TTL + Renew.
	TTL time.Duration
	// Renew is how often the leader renews and the heir polls.
	Renew time.Duration
	// HeirTTL is the heir's lease.
	HeirTTL time.Duration
	// StandbyEvery is how often, on average, a standby tries to become the
	// heir.
	StandbyEvery time.Duration
	// Logger receives Redis errors (at Warn). Defaults to slog.Default(),
	// warnings and above only.
	Logger *slog.Logger
}

// Election is one candidate's campaign.
type Election struct {
	rdb   redis.UniversalClient
	id    string
	cfg   Config
	baton *wake.Waiter
}

// New returns the campaign of candidate id (unique in the fleet; it is the
// value of the lease keys) on rdb.
func New(rdb redis.UniversalClient, id string, cfg Config) (*Election, error) {
	if cfg.Lease == "" || cfg.Heir == "" || cfg.Lease == cfg.Heir {
		return nil, errors.New("elect: Lease and Heir must be two keys")
	}
	if id == "" {
		return nil, errors.New("elect: empty candidate ID")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Renew <= 0 {
		cfg.Renew = DefaultRenew
	}
	if cfg.HeirTTL <= 0 {
		cfg.HeirTTL = DefaultHeirTTL
	}
	if cfg.StandbyEvery <= 0 {
		cfg.StandbyEvery = DefaultStandbyEvery
	}
	if cfg.Renew >= cfg.TTL || 4*cfg.Renew >= cfg.HeirTTL {
		return nil, fmt.Errorf("elect: Renew %v must be under TTL %v and a quarter of HeirTTL %v", cfg.Renew, cfg.TTL, cfg.HeirTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = logs.Default()
	}
	return &Election{rdb: rdb, id: id, cfg: cfg, baton: wake.NewWaiter(rdb, cfg.Heir+":baton")}, nil
}

// role is where a candidate stands.
type role int

const (
	standby role = iota
	heir
	leader
)

// Run campaigns until ctx ends. Each time the candidate wins the lease, Run
// calls lead with a context that ends when the candidate stops being the
// leader (it lost the lease, or ctx ended) and waits for lead to return
// before it goes on. When ctx ends Run gives up the leases it holds, so that
// the heir takes over at its next poll, and returns nil.
func (e *Election) Run(ctx context.Context, lead func(ctx context.Context)) error {
	r := standby
	defer func() {
		// ctx is done: resign with a context of our own.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e.resign(rctx, r)
	}()
	for ctx.Err() == nil {
		switch r {
		case standby:
			r = e.standby(ctx)
		case heir:
			r = e.heir(ctx)
		case leader:
			r = e.lead(ctx, lead)
		}
	}
	return nil
}

// standby tries for the heir's lease now, then each time the baton wakes
// it or StandbyEvery passes (jittered between half and one and a half of
// it), and returns heir when it got it. With the heir's seat taken it tries
// for the leader's lease too (and returns leader when it got it: the leader
// and the heir died together). It looks once more HeirTTL after it
// started, so that a candidate that starts while a dead heir's lease holds
// the seat takes over when that lease runs out, not a minute later.
func (e *Election) standby(ctx context.Context) role {
	recheck := time.Now().Add(e.cfg.HeirTTL + e.cfg.Renew)
	for {
		ok, err := e.take(ctx, e.cfg.Heir, e.cfg.HeirTTL)
		if err != nil {
			e.warn(ctx, "taking the heir's lease failed", err)
		} else if ok {
			return heir
		}
		if ok, err := e.take(ctx, e.cfg.Lease, e.cfg.TTL); err != nil {
			e.warn(ctx, "taking the leader's lease failed", err)
		} else if ok {
			return leader
		}
		every := e.cfg.StandbyEvery
		wait := every/2 + rand.N(every)
		if until := time.Until(recheck); until > 0 {
			wait = until
		}
		if _, err := e.baton.Wait(ctx, wait); err != nil {
			if ctx.Err() != nil {
				return standby
			}
			e.warn(ctx, "waiting for the heir's baton failed", err)
			if !sleep(ctx, e.cfg.HeirTTL) {
				return standby
			}
		}
	}
}

// passBaton wakes one standby to take the heir's seat.
func (e *Election) passBaton(ctx context.Context) {
	// The baton expires: with no standby to take it, it must not outlive
	// the election's other keys (the leader passes it again every
	// heirCheck renewals while the seat is empty).
	if err := wake.SignalFor(ctx, e.rdb, e.baton.Key(), e.cfg.HeirTTL); err != nil {
		e.warn(ctx, "waking a standby failed", err)
	}
}

// heir polls the leader's lease every Renew and takes it when it is gone;
// every fourth poll it renews its own.
func (e *Election) heir(ctx context.Context) role {
	for n := 0; ; n++ {
		ok, err := e.take(ctx, e.cfg.Lease, e.cfg.TTL)
		switch {
		case err != nil:
			e.warn(ctx, "polling the leader's lease failed", err)
		case ok:
			// The heir's seat is free for a standby at once.
			_, _ = resignScript.Run(ctx, e.rdb, []string{e.cfg.Heir}, e.id)
			e.passBaton(ctx)
			return leader
		}
		if n%4 == 3 {
			if held, err := e.renew(ctx, e.cfg.Heir, e.cfg.HeirTTL); err != nil {
				e.warn(ctx, "renewing the heir's lease failed", err)
			} else if !held {
				return standby
			}
		}
		if !sleep(ctx, e.cfg.Renew) {
			return heir
		}
	}
}

// lead runs lead while it renews the lease every Renew. It returns heir
// when no renewal got through for TTL (Redis errors: the lease may have run
// out), and standby when the lease was gone or another candidate held it
// (a standby tries for the lease again at once).
func (e *Election) lead(ctx context.Context, lead func(ctx context.Context)) role {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lead(lctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	// valid is when the lease runs out for sure: a renewal's send time plus
	// TTL. A leader that cannot renew stops leading then, whatever Redis
	// says later.
	valid := time.Now().Add(e.cfg.TTL)
	for n := 1; ; n++ {
		if !sleep(ctx, e.cfg.Renew) {
			return leader
		}
		if n%heirCheck == 0 {
			// An heir that died leaves its seat empty when its lease runs out.
			if k, err := e.rdb.Exists(ctx, e.cfg.Heir).Result(); err == nil && k == 0 {
				e.passBaton(ctx)
			}
		}
		sent := time.Now()
		held, err := e.renew(ctx, e.cfg.Lease, e.cfg.TTL)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return leader
			}
			e.warn(ctx, "renewing the leader's lease failed", err)
			if time.Now().After(valid) {
				return heir
			}
		case held:
			valid = sent.Add(e.cfg.TTL)
		default:
			return standby
		}
	}
}

// take sets key to the candidate's ID for ttl if no one holds it, and
// reports whether it did.
func (e *Election) take(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	err := e.rdb.SetArgs(ctx, key, e.id, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

// renew extends the candidate's lease key by ttl and reports whether it
// names the candidate, with one GETEX: a write Redis allows on a full
// Redis (maxmemory, noeviction), where it refuses SET, so that a keeper
// keeps its seat while Redis is full. GETEX never changes the value: when
// the key names another candidate (this one's lease ran out and the other
// took it), its TTL is set to ttl, which the holder's own next renewal
// sets again, and renew reports false. When the key is gone, nothing is
// written.
func (e *Election) renew(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	v, err := e.rdb.GetEx(ctx, key, ttl).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	}
	return v == e.id, nil
}

// resign gives up the lease of role r, if still held.
func (e *Election) resign(ctx context.Context, r role) {
	key := ""
	switch r {
	case leader:
		key = e.cfg.Lease
	case heir:
		key = e.cfg.Heir
	default:
		return
	}
	if _, err := resignScript.Run(ctx, e.rdb, []string{key}, e.id); err != nil {
		e.warn(ctx, "giving up the lease failed; it runs out on its own", err)
	}
	if r == heir {
		e.passBaton(ctx)
	}
}

func (e *Election) warn(ctx context.Context, msg string, err error) {
	if ctx.Err() != nil {
		return
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "elect: "+msg,
		slog.String("key", e.cfg.Lease), slog.String("candidate", e.id), slog.String("error", err.Error()))
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Needs are the commands an election (its scripts aside: GET and DEL of
// the lease, see redischeck.Durable for EVALSHA) on the keys lease and heir sends, for
// Driver.Check (see redischeck).
func Needs(lease, heir string) []redischeck.Need {
	baton := heir + ":baton"
	cancel := baton + ":cancel:probe"
	return []redischeck.Need{
		redischeck.Key(lease, "SET", lease, "v", "NX", "PX", "1"),
		redischeck.Key(lease, "GETEX", lease, "PX", "1"),
		redischeck.Key(heir, "EXISTS", heir),
		redischeck.Key(baton, "ZADD", baton, "0", "m"),
		redischeck.Key(baton, "PEXPIRE", baton, "1"),
		redischeck.Key(baton, "BZPOPMIN", baton, cancel, "0.001"),
		redischeck.Key(cancel, "DEL", cancel),
	}
}
