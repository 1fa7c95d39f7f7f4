package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/script"
)

// A read of the group (XREADGROUP, or fetch.lua) whose reply is lost after
// Redis ran it leaves the entries it read in this consumer's pending list,
// with no caller to run them. Left alone they would wait out the visibility
// timeout and come back counted as a crash recovery (toward MaxRecoveries),
// though no worker crashed. So reads are sent once (go-redis would send a
// read again after a lost reply, reading further entries and hiding the
// loss), a read whose outcome is unknown (script.Unsure) marks the
// consumer, and its next fetch round first hands back every entry pending
// for it that it did not hand out (recoverLost). A handed-back entry is
// stored again at the end of the stream with no attempt and no recovery
// counted (an entry a lost fetch.lua took over keeps the recovery that
// takeover counted), like a release; it is counted in Stats().Released.
//
// Fencing stays with the scripts: the hand-back is a Release, which checks
// the owner and the delivery count XPENDING showed. What the consumer must
// not hand back is a delivery it gave out and still runs; held names them,
// from the moment a read's entries are decoded until they are settled (or
// their lease is found lost), and no read is under way while recoverLost
// looks (reading).

// maxHeld bounds held. A consumer that hands out more deliveries than this
// without settling them (its caller drops them) stops tracking them and no
// longer recovers lost reads: their entries then come back after the
// visibility timeout, as before.
const maxHeld = 1 << 16

// maxLostPages bounds the XPENDING pages (of maxFetch entries) recoverLost
// reads.
const maxLostPages = 16

// hold records ds as handed out.
func (c *consumer) hold(ds []*broker.Delivery) {
	if len(ds) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heldFull {
		return
	}
	if len(c.held)+len(ds) > maxHeld {
		c.heldFull, c.held = true, nil
		c.d.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn,
			"stream: too many unsettled deliveries to track; entries of fetches whose reply is lost now come back after the visibility timeout",
			slog.String("queue", c.queue), slog.Int("max", maxHeld))
		return
	}
	for _, d := range ds {
		c.held[d.Receipt] = d.Token
	}
}

// unhold forgets settled deliveries. A delivery of an entry that was
// handed out again since (this consumer took over its own expired lease)
// leaves the later delivery held.
func (c *consumer) unhold(ds []*broker.Delivery) {
	if len(ds) == 0 {
		return
	}
	c.mu.Lock()
	for _, d := range ds {
		if c.held[d.Receipt] == d.Token {
			delete(c.held, d.Receipt)
		}
	}
	c.mu.Unlock()
}

// noteRead marks the consumer when err leaves a read's outcome unknown.
func (c *consumer) noteRead(err error) {
	if script.Unsure(err) {
		c.mu.Lock()
		c.lost = lostReply
		c.mu.Unlock()
	}
}

// lostReply is why entries are handed back after a read whose reply was
// lost.
const lostReply = "a fetch's reply was lost"

// noteScript marks the consumer when fetch.lua failed: a script that
// Redis stopped with an error keeps the writes it made before it (an
// XREADGROUP among them), so entries may be pending for this consumer
// that it never handed out.
func (c *consumer) noteScript(err error) {
	if script.RanInPart(err) {
		c.mu.Lock()
		c.lost = "the fetch script failed (" + err.Error() + ")"
		c.mu.Unlock()
		return
	}
	c.noteRead(err)
}

// readGroup sends one XREADGROUP, once, through via: the client, or a
// limitGate that sends an EXISTS with it (admit.go). The command is built
// by go-redis's own XReadGroup, on a pipeline that is never run, so that a
// blocking read keeps the read timeout go-redis gives it.
func (c *consumer) readGroup(ctx context.Context, via script.Processor, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	cmd := c.d.rdb.Pipeline().XReadGroup(ctx, args)
	_ = script.Send(ctx, via, cmd)
	// The read's own outcome: via's may be that of a command sent with it.
	err := cmd.Err()
	if !errors.Is(err, redis.Nil) {
		c.noteRead(err)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// recoverLost hands back the entries pending for this consumer that it did
// not hand out, when a read's reply was lost; it does nothing otherwise, or
// while a read is under way (the next round tries again).
func (c *consumer) recoverLost(ctx context.Context) error {
	c.mu.Lock()
	why := c.lost
	due := why != "" && !c.heldFull
	c.mu.Unlock()
	if !due || !c.reading.TryLock() {
		return nil
	}
	defer c.reading.Unlock()

	var orphans []*broker.Delivery
	start := "-"
	for range maxLostPages {
		ps, err := c.d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: c.keys.stream, Group: c.d.cfg.Group, Start: start, End: "+", Count: maxFetch, Consumer: c.name,
		}).Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
			break // no stream or no group: nothing is pending
		}
		if err != nil {
			return fmt.Errorf("recover a lost read: %w", err)
		}
		c.mu.Lock()
		for _, p := range ps {
			// Pending under another delivery count than the one handed
			// out: a lost read took the entry over again.
			if tok := token(p.ID, p.RetryCount); c.held[p.ID] != tok {
				d := &broker.Delivery{Receipt: p.ID, Token: tok}
				d.Queue, d.ConsumerGroup, d.ID = c.queue, c.d.cfg.Group, p.ID
				orphans = append(orphans, d)
			}
		}
		c.mu.Unlock()
		if len(ps) < maxFetch {
			break
		}
		start = "(" + ps[len(ps)-1].ID
	}

	n, err := script.HandedBack(len(orphans), c.Release(ctx, orphans...))
	if err != nil {
		// Not settled, or not known to be: keep the mark and try again
		// next round.
		return fmt.Errorf("recover a lost read: %w", err)
	}
	c.mu.Lock()
	c.lost = ""
	c.mu.Unlock()
	if n > 0 {
		c.d.released.Add(int64(n))
		c.d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn,
			"stream: entries read but not handed out were handed back, no recovery counted",
			slog.String("queue", c.queue), slog.Int("count", n), slog.String("why", why))
	}
	return nil
}
