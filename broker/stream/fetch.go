package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/pause"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/wake"
)

// Fetch returns between 1 and max deliveries (max is capped at 1000).
//
// Each round is one round trip. A round that takes over expired leases (an
// XAUTOCLAIM pass starts at most once per PollInterval and runs until done)
// runs all of fetch.lua: reclaim, read new entries. Other rounds are one
// plain XREADGROUP (see readNew); on a queue with concurrency limits, a
// round that reads entries takes a second round trip to admit them
// (admit.go). When a round finds nothing, Fetch blocks in XREADGROUP ...
// BLOCK for at most PollInterval and tries again (a promoter's XADD of a
// due timer wakes it at once); when the stream does not exist yet it
// blocks on the stream's creation instead. An idle consumer so sends about
// two commands per PollInterval. A kept consumer (broker.ConsumerOptions.Kept) runs no pass of its own and
// sleeps on the queue's wake signals instead (see wait and Driver.Upkeep):
// one command a minute when idle. Before each of these waits, and before
// each wait on a paused queue, Fetch calls broker.ConsumerOptions.Idle.
//
// The blocking read runs in a goroutine so that Fetch returns ctx.Err() as
// soon as ctx is done (or broker.ErrClosed when the consumer is closed); if
// that read then returns entries, they are handed back to the queue at once
// rather than waiting out their lease.
func (c *consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("stream: fetch: max %d is not positive", max)
	}
	max = min(max, maxFetch)
	for {
		if c.isClosed() {
			return nil, fmt.Errorf("stream: fetch: %w", broker.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if held, err := c.pause.Hold(ctx, c.d.rdb, c.keys.paused, c.closing.Done(), c.idle); err != nil {
			if !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("stream: fetch: %w", err)
			}
			return nil, err
		} else if held {
			continue // paused when last asked: read nothing until it is not
		}
		r, err := c.fetchOnce(ctx, max)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("stream: fetch: %w", err)
		}
		if c.kept && r.read > 0 && r.read == r.asked {
			// More may wait: wake the next sleeping consumer (one wake-up
			// per batch).
			next := c.keys.wake
			if r.claimed {
				next = c.keys.reclaim
			}
			c.signal(next)
		}
		if len(r.ds) > 0 {
			if c.pausedAfterRead(ctx, r.ds) {
				continue
			}
			return r.ds, nil
		}
		if r.read > 0 || r.poisoned > 0 {
			continue // all were undecodable or poison (and discarded): more may wait
		}
		c.mu.Lock()
		pass := c.cursor != "0-0"
		c.mu.Unlock()
		if pass {
			continue // a takeover pass is under way: go on with it, do not wait
		}
		c.idle()
		if err := ctx.Err(); err != nil {
			return nil, err // the Idle hook may end ctx: start no read
		}
		if c.kept {
			if err := c.sleep(ctx); err != nil {
				return nil, err
			}
			continue
		}
		ds, err := c.block(ctx, max, c.d.cfg.PollInterval, r.noStream)
		if err != nil {
			return nil, err
		}
		if len(ds) > 0 {
			if c.pausedAfterRead(ctx, ds) {
				continue
			}
			return ds, nil
		}
	}
}

// signal sets the wake signal key in the background, one at a time: a
// round trip in Fetch's path would slow a busy consumer's every fetch (a
// fifth of the end-to-end throughput with a backlog), and a signal that is
// skipped or fails only leaves the sleeping consumers to the next one, or
// to the keeper's look for unread entries within a second.
func (c *consumer) signal(key string) {
	if !c.signalling.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.signalling.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = wake.Signal(ctx, c.d.rdb, key)
	}()
}

// Sleep implements broker.Sleeper. A kept consumer sleeps on its queue's
// wake signals as its Fetch does (see sleep); one that is not kept sleeps
// on them for at most PollInterval, the time after which its own Fetch
// would read again and run its takeover pass (it cannot block in
// XREADGROUP, which would lease what it found). Enqueues and promoted
// timers set the wake signal, so either wakes for a new job at once.
// While the queue is known to be paused it waits PauseLag.
func (c *consumer) Sleep(ctx context.Context) (bool, error) {
	if c.pause.Known() {
		return false, pause.Wait(ctx, c.closing.Done())
	}
	if c.kept {
		err := c.sleep(ctx)
		return err == nil, err
	}
	key, err := c.wait(ctx, c.d.cfg.PollInterval)
	return key == c.keys.wake && err == nil, err
}

// Wake implements broker.Sleeper: it sets the queue's wake signal while
// the stream exists.
func (c *consumer) Wake(ctx context.Context) error {
	if err := wake.SignalIf(ctx, c.d.rdb, c.keys.stream, c.keys.wake); err != nil {
		return fmt.Errorf("stream: wake: %w", err)
	}
	return nil
}

// sleep waits on the queue's wake signals until one wakes the consumer, ctx
// is done or the consumer is closed. A wait that ran out (keptBlock) is
// followed by another, not by a read: nothing signalled, so nothing came
// (the keeper signals entries that came without one). The reclaim signal
// asks for a takeover pass at once.
//
// A consumer woken for new entries after less than PollInterval asleep is
// under load: it runs its own pass when one is due (once per
// PollInterval), as a consumer that is not kept does, so that every busy
// consumer takes its part of a crash's expired leases (left to the
// keeper's signal, they would go to the consumers idle the longest). One
// woken after PollInterval or more puts its pass off for PollInterval:
// it was idle, so a job handed to a fleet of idle consumers costs one
// read, not a pass, and the keeper's signal covers the leases that expire
// meanwhile.
func (c *consumer) sleep(ctx context.Context) error {
	start := time.Now()
	for {
		key, err := c.wait(ctx, keptBlock)
		if err != nil {
			return err
		}
		if key == "" {
			continue
		}
		now := time.Now()
		c.mu.Lock()
		switch {
		case key == c.keys.reclaim:
			c.passDue = true
		case now.Sub(start) >= c.d.cfg.PollInterval:
			c.nextClaim = now.Add(c.d.cfg.PollInterval)
		}
		c.mu.Unlock()
		return nil
	}
}

// wait sleeps on the queue's wake signals (internal/wake) for at most d,
// until one wakes it (its key), ctx is done (ctx.Err()) or the consumer is
// closed (broker.ErrClosed).
func (c *consumer) wait(ctx context.Context, d time.Duration) (string, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", fmt.Errorf("stream: fetch: %w", broker.ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	key, err := c.waiter.WaitOpen(ctx, c.closing, d)
	if err != nil && err != ctx.Err() {
		err = fmt.Errorf("stream: fetch: %w", err)
	}
	return key, err
}

// fetchResult is what one fetch.lua call found.
type fetchResult struct {
	ds       []*broker.Delivery
	asked    int  // entries the round asked for
	read     int  // entries read, including undecodable and parked ones not in ds
	claimed  bool // the round was a takeover pass
	poisoned int  // entries discarded as poison instead of delivered
	parked   int  // entries read that wait in a concurrency limit's line instead (fetch.lua only)
	noStream bool
}

// fetchOnce runs one fetch round; it recreates the consumer group if
// someone destroyed it while the stream lives on. NOGROUP also comes from a
// stream deleted by hand (with its group) and recreated between two
// commands of a round, so it tries a few rounds before giving up.
func (c *consumer) fetchOnce(ctx context.Context, max int) (fetchResult, error) {
	for attempt := 1; ; attempt++ {
		r, err := c.runFetch(ctx, max)
		if err == nil || !strings.Contains(err.Error(), "NOGROUP") || attempt == 4 {
			return r, err
		}
		// Not MKSTREAM: if the stream is gone too, the next round sees that.
		// BUSYGROUP: someone recreated the stream and its group first.
		cerr := c.d.rdb.XGroupCreate(ctx, c.keys.stream, c.d.cfg.Group, "0").Err()
		if cerr == nil {
			c.d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "stream: consumer group was missing; recreated it from ID 0",
				slog.String("queue", c.queue), slog.String("group", c.d.cfg.Group))
		}
		if cerr != nil && !strings.Contains(cerr.Error(), "BUSYGROUP") && !strings.Contains(cerr.Error(), "requires the key to exist") {
			return r, err
		}
	}
}

// runFetch runs one non-blocking fetch round, after handing back the
// entries of a read whose reply was lost (see lost.go). A round that takes
// over expired leases (an XAUTOCLAIM pass, at most once per PollInterval
// unless a pass is under way) runs all of fetch.lua; any other round is
// readNew.
func (c *consumer) runFetch(ctx context.Context, max int) (fetchResult, error) {
	if err := c.recoverLost(ctx); err != nil {
		return fetchResult{}, err
	}
	c.prune(ctx)
	c.reading.RLock()
	defer c.reading.RUnlock()
	res, err := c.round(ctx, max)
	if err == nil {
		c.hold(res.ds)
	}
	return res, err
}

// round runs one fetch round for runFetch.
func (c *consumer) round(ctx context.Context, max int) (fetchResult, error) {
	start := time.Now()
	c.mu.Lock()
	cursor := ""
	if c.cursor != "0-0" || c.passDue || !start.Before(c.nextClaim) {
		cursor = c.cursor
	}
	// A pass the keeper's reclaim signal asked for takes a share of the
	// expired leases (reclaimShare of what the consumer asked for) and,
	// when it got a full share, leaves the rest to the next consumer it
	// wakes: a crash's jobs go back to several workers, not all to the
	// one the signal woke first.
	share := cursor == "0-0" && c.passDue
	c.passDue = false
	c.mu.Unlock()
	if cursor == "" {
		return c.readNew(ctx, max, start)
	}
	if share {
		max = (max + reclaimShare - 1) / reclaimShare
	}

	v, err := fetchScript.Run(ctx, c.d.rdb, c.fetchKeys(),
		c.d.cfg.Group, c.name, max, c.vtMS, cursor, c.d.cfg.MaxRecoveries, c.d.cfg.DiscardMax, c.d.Keeper.Retention.AgeArg())
	c.noteScript(err)
	if err != nil {
		return fetchResult{}, err
	}
	res, next, rest, err := c.parseFetch(ctx, v)
	if err != nil {
		return fetchResult{}, err
	}
	res.claimed = true
	n := len(rest) / 3
	res.read, res.asked = n+res.parked, max
	if share && n == max {
		next = "0-0" // the next consumer woken goes on (Fetch signals it)
	}
	if next != "" {
		c.mu.Lock()
		c.cursor = next
		if next == "0-0" {
			c.nextClaim = start.Add(c.d.cfg.PollInterval)
		}
		c.mu.Unlock()
	}

	if n == 0 {
		return res, nil
	}
	deadline := start.Add(c.vt)
	buf := make([]broker.Delivery, n)
	res.ds = make([]*broker.Delivery, 0, n)
	var reclaimed int64
	for i := range n {
		id, _ := rest[3*i].(string)
		count, _ := rest[3*i+1].(int64)
		body, _ := rest[3*i+2].(string)
		d := &buf[i]
		if !c.decode(ctx, d, id, count, body, deadline) {
			continue
		}
		if count > 1 {
			reclaimed++
		}
		res.ds = append(res.ds, d)
	}
	if reclaimed > 0 {
		c.d.reclaimed.Add(reclaimed)
	}
	return res, nil
}

// readNew reads new entries with a plain XREADGROUP ... > (no BLOCK), the
// hot path, outside Lua: handing entries through a script cost Redis about
// as much again as reading them. XREADGROUP is one atomic command: an entry
// it returns is in this consumer's pending list, like one fetch.lua reads;
// it is sent once (see lost.go). An EXISTS of the queue's limits key rides
// in the same round trip, and when the queue has limits the entries go
// through admission (see admit.go) before they are handed out.
// NOGROUP means the stream does not exist (no enqueue created it yet, or
// it was deleted by hand; Fetch then blocks on its creation) or, when it
// does, that someone destroyed the group (fetchOnce recreates it).
func (c *consumer) readNew(ctx context.Context, max int, start time.Time) (fetchResult, error) {
	gate := &limitGate{rdb: c.d.rdb, key: c.keys.limits.Max}
	streams, err := c.readGroup(ctx, gate, &redis.XReadGroupArgs{
		Group: c.d.cfg.Group, Consumer: c.name,
		Streams: []string{c.keys.stream, ">"}, Count: int64(max), Block: -1, // -1: no BLOCK
	})
	switch {
	case errors.Is(err, redis.Nil):
		return fetchResult{}, nil
	case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
		n, xerr := c.d.rdb.Exists(ctx, c.keys.stream).Result()
		if xerr != nil {
			return fetchResult{}, xerr
		}
		if n == 0 {
			return fetchResult{noStream: true}, nil
		}
		return fetchResult{}, err
	case err != nil:
		return fetchResult{}, err
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	if len(msgs) == 0 {
		return fetchResult{}, nil
	}
	res := fetchResult{read: len(msgs), asked: max}
	if gate.limited() {
		if msgs, err = c.admit(ctx, msgs); err != nil {
			return fetchResult{}, err
		}
	}
	deadline := start.Add(c.vt)
	buf := make([]broker.Delivery, len(msgs))
	res.ds = make([]*broker.Delivery, 0, len(msgs))
	for i, m := range msgs {
		body, _ := m.Values["m"].(string)
		if c.decode(ctx, &buf[i], m.ID, 1, body, deadline) {
			res.ds = append(res.ds, &buf[i])
		}
	}
	return res, nil
}

// fetchKeys returns fetch.lua's KEYS.
func (c *consumer) fetchKeys() []string {
	k := c.keys
	return slices.Concat([]string{k.stream, k.dead, k.deadDropped, k.deadExpired, k.reclaimed, k.wake, k.canceled}, k.groups.List(), k.limits.List())
}

// parseFetch parses fetch.lua's reply: the next XAUTOCLAIM cursor ("" when
// the call did not reclaim) and the entries as flat triples, with the
// number of entries parked in a concurrency limit's line. It reports the
// entries XAUTOCLAIM found deleted and those discarded as poison.
func (c *consumer) parseFetch(ctx context.Context, v any) (res fetchResult, next string, rest []any, err error) {
	reply, ok := v.([]any)
	if !ok || len(reply) < 5 {
		return res, "", nil, fmt.Errorf("fetch.lua: unexpected reply %T", v)
	}
	next, _ = reply[0].(string)
	parked, _ := reply[1].(int64)
	noStream, _ := reply[2].(int64)
	ndel, _ := reply[3].(int64)
	npoison, _ := reply[4].(int64)
	rest = reply[5:]
	if parked < 0 || ndel < 0 || npoison < 0 || ndel+2*npoison > int64(len(rest)) || (len(rest)-int(ndel+2*npoison))%3 != 0 {
		return res, "", nil, fmt.Errorf("fetch.lua: malformed reply")
	}
	if ndel > 0 {
		c.reportDeleted(ctx, rest[:ndel])
	}
	rest = rest[ndel:]
	if npoison > 0 {
		c.reportPoisoned(ctx, rest[:2*npoison])
	}
	rest = rest[2*npoison:]
	return fetchResult{noStream: noStream == 1, poisoned: int(npoison), parked: int(parked)}, next, rest, nil
}

// decode fills d from a stream entry. A message that cannot be decoded is
// moved to the discard list (it would fail the same way on every delivery)
// and decode reports false.
func (c *consumer) decode(ctx context.Context, d *broker.Delivery, id string, count int64, body string, deadline time.Time) bool {
	d.Receipt = id
	d.Token = token(id, count)
	d.LeaseDeadline = deadline
	d.ConsumerGroup = c.d.cfg.Group
	d.Queue = c.queue
	if _, err := codec.DecodeString(body, &d.Message); err != nil {
		c.d.cfg.Logger.LogAttrs(ctx, slog.LevelError, "stream: undecodable message discarded",
			slog.String("queue", c.queue), slog.String("entry_id", id), slog.String("error", err.Error()))
		if derr := c.discard(ctx, d, err.Error()); derr != nil {
			c.d.cfg.Logger.LogAttrs(ctx, slog.LevelError, "stream: discard of undecodable message failed",
				slog.String("queue", c.queue), slog.String("entry_id", id), slog.String("error", derr.Error()))
		}
		return false
	}
	// A delivery count above 1 means earlier leases of this entry expired.
	d.Recoveries += int(count - 1)
	d.LastChance = broker.IsLastChance(d.Recoveries, c.d.cfg.MaxRecoveries)
	return true
}

// reportDeleted logs and counts entries XAUTOCLAIM found pending but deleted
// from the stream: their messages are lost, which must not go unnoticed.
func (c *consumer) reportDeleted(ctx context.Context, raw []any) {
	ids := make([]string, 0, len(raw))
	for _, v := range raw {
		if s, ok := v.(string); ok {
			ids = append(ids, s)
		}
	}
	c.d.deletedPending.Add(int64(len(raw)))
	c.d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn,
		"stream: pending entries were deleted from the stream (XDEL or trim by hand); their messages are lost",
		slog.String("queue", c.queue), slog.Any("entry_ids", ids))
}

// reportPoisoned logs and counts the entries fetch.lua moved to the discard
// list as poison; raw holds pairs of entry ID and message ID. An operator
// should learn that a message keeps killing workers even though nothing is
// lost: the record waits in the discard list for a re-drive.
func (c *consumer) reportPoisoned(ctx context.Context, raw []any) {
	entries := make([]string, 0, len(raw)/2)
	msgs := make([]string, 0, len(raw)/2)
	for i := 0; i+1 < len(raw); i += 2 {
		e, _ := raw[i].(string)
		m, _ := raw[i+1].(string)
		entries = append(entries, e)
		msgs = append(msgs, m)
	}
	c.d.poisoned.Add(int64(len(entries)))
	c.d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn,
		"stream: poison messages discarded: their lease expired MaxRecoveries times (a worker crashed or stalled on each)",
		slog.String("queue", c.queue), slog.Int("max_recoveries", c.d.cfg.MaxRecoveries),
		slog.Any("entry_ids", entries), slog.Any("message_ids", msgs))
}

// blockResult is the outcome of one blocking read.
type blockResult struct {
	ds  []*broker.Delivery
	err error
}

// block waits up to wait for new entries (or, with noStream, for the stream
// to be created). It returns as soon as ctx is done or the consumer closed;
// the read goroutine then hands back whatever it receives.
func (c *consumer) block(ctx context.Context, max int, wait time.Duration, noStream bool) ([]*broker.Delivery, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("stream: fetch: %w", broker.ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()
	c.reading.RLock() // until the entries read are held or handed back

	results := make(chan blockResult) // unbuffered: a send means Fetch took it
	giveUp := make(chan struct{})
	// The read itself is not cancelled with ctx: go-redis would drop the
	// connection and entries the server had already delivered would sit in
	// the pending list until their lease ran out.
	rctx := context.WithoutCancel(ctx)
	if c.blockHook != nil {
		c.blockHook()
	}
	go func() {
		defer c.wg.Done()
		ds, err := c.readBlocking(rctx, max, wait, noStream, giveUp)
		c.hold(ds) // before Fetch's caller may settle them
		// Held, the entries are safe from recoverLost: the read is over
		// for it before Fetch returns, so that the caller's next Fetch
		// finds no read under way and can hand back a lost one at once.
		c.reading.RUnlock()
		select {
		case results <- blockResult{ds, err}:
		case <-giveUp:
			if len(ds) > 0 {
				c.handBack(ds) // still held meanwhile: recoverLost leaves them
				c.unhold(ds)
			}
		}
	}()
	select {
	case r := <-results:
		if r.err != nil {
			return nil, fmt.Errorf("stream: fetch: %w", r.err)
		}
		return r.ds, nil
	case <-ctx.Done():
		close(giveUp)
		return nil, ctx.Err()
	case <-c.closing.Done():
		close(giveUp)
		return nil, fmt.Errorf("stream: fetch: %w", broker.ErrClosed)
	}
}

// readBlocking runs one blocking read. It returns no deliveries and no
// error when the read timed out, when the stream was created (noStream) or
// when the stream or group vanished meanwhile: the caller runs fetch.lua again.
//
// The entries it reads go through admission (admit.go) in one more round
// trip, with or without limits: a blocking command cannot share a
// pipeline with the EXISTS readNew sends (go-redis reads a pipeline's
// replies within the client's ReadTimeout, not the block's). A busy
// consumer reads with readNew; this costs the first read after each idle
// spell. Entries read once Fetch gave up (giveUp is closed) skip
// admission: block hands them back, and holding no slot, they let no
// waiting job in ahead of them.
func (c *consumer) readBlocking(ctx context.Context, max int, wait time.Duration, noStream bool, giveUp <-chan struct{}) ([]*broker.Delivery, error) {
	if noStream {
		// Wakes when enqueue.lua (or a promotion) creates the stream. ID 0-0
		// returns at once if it was created since fetch.lua looked.
		err := c.d.rdb.XRead(ctx, &redis.XReadArgs{
			Streams: []string{c.keys.stream, "0-0"}, Count: 1, Block: wait,
		}).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		return nil, nil
	}
	streams, err := c.readGroup(ctx, c.d.rdb, &redis.XReadGroupArgs{
		Group: c.d.cfg.Group, Consumer: c.name,
		Streams: []string{c.keys.stream, ">"}, Count: int64(max), Block: wait,
	})
	received := time.Now()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		msg := err.Error()
		// NOGROUP: the stream was deleted (all acked) before the read;
		// UNBLOCKED: it was deleted while the read blocked (Redis 7).
		if strings.HasPrefix(msg, "NOGROUP") || strings.HasPrefix(msg, "UNBLOCKED") {
			return nil, nil
		}
		return nil, err
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	select {
	case <-giveUp:
	default:
		if msgs, err = c.admit(ctx, msgs); err != nil {
			return nil, err
		}
	}
	// The lease started when the server delivered, just before received.
	deadline := received.Add(c.vt)
	buf := make([]broker.Delivery, len(msgs))
	ds := make([]*broker.Delivery, 0, len(msgs))
	for i, m := range msgs {
		body, _ := m.Values["m"].(string)
		if c.decode(ctx, &buf[i], m.ID, 1, body, deadline) {
			ds = append(ds, &buf[i])
		}
	}
	return ds, nil
}

// A consumer learns that its queue is paused when a read returns entries:
// it then asks Redis (pause.Seen: at most once per broker.PauseLag), hands
// the entries back if the queue is paused, and reads nothing more until a
// look, once per PauseLag, finds it resumed. An idle consumer (reads that
// return nothing) so sends no command for pauses.

// Paused reports whether the queue is paused, asking Redis at most once per
// broker.PauseLag (broker.PauseWatcher); the answer is shared with Fetch.
func (c *consumer) Paused(ctx context.Context) (bool, error) {
	return c.pause.Paused(ctx, c.d.rdb, c.keys.paused)
}

// pausedAfterRead hands ds back and reports true when the queue is paused:
// the read may have begun before the pause, or the consumer had not asked
// for a while.
func (c *consumer) pausedAfterRead(ctx context.Context, ds []*broker.Delivery) bool {
	p, err := c.Paused(ctx)
	if err != nil || !p {
		return false // Redis did not say: the entries were read in good faith
	}
	c.handBack(ds)
	c.unhold(ds)
	return true
}

// handBack releases deliveries read that Fetch will not return: its caller
// gave up, or the queue turned out to be paused.
func (c *consumer) handBack(ds []*broker.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := script.HandedBack(len(ds), c.Release(ctx, ds...))
	c.d.released.Add(int64(n))
	if err != nil {
		// Those not handed back are pending for this consumer and not
		// held: the next fetch round hands them back (see lost.go).
		c.mu.Lock()
		c.lost = "an earlier hand-back failed (" + err.Error() + ")"
		c.mu.Unlock()
		c.d.cfg.Logger.LogAttrs(ctx, slog.LevelError,
			"stream: could not hand back deliveries read but not returned by fetch; the next fetch tries again",
			slog.String("queue", c.queue), slog.Int("count", len(ds)), slog.String("error", err.Error()))
	}
}
