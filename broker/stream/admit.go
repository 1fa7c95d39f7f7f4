package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/script"
)

// Concurrency limits (broker.Limiter, internal/limits; SetLimit and Limits
// are in methods.go). A delivery holds its slots under its entry ID, the
// holder the limit keys name: a takeover keeps the entry ID, so an entry
// taken over keeps its slots, and a slot is given back by the script that
// ends the delivery (ack.lua, ack_record.lua, requeue.lua, discard.lua,
// and fetch.lua for the entries a takeover discards, removes or finds
// deleted).
//
// Slots are taken when entries are read, before they are handed out:
// fetch.lua admits the entries it delivers in its own call; the entries a
// plain XREADGROUP reads (readNew, readBlocking) go through admit.lua. An
// entry over a limit is XACKed and XDELed and waits in the limit's line
// (not handed out, no attempt counted) until a slot comes back and
// appends it to the stream again.
//
// Whether a read needs admit.lua must cost a queue without limits next to
// nothing: readNew sends an EXISTS of the queue's limits key in the read's
// own round trip (limitGate) and runs admit.lua only when the key exists.
// A limit set between the read and the EXISTS is seen; one set after it
// applies from the next read. readBlocking runs admit.lua after every
// blocking read that returns entries (see there).

var _ broker.Limiter = (*Driver)(nil)

// limitGate is a script.Processor that sends a command (a read of the
// group) in one pipeline with an EXISTS of the queue's limits key, after
// it: whether the read's entries need admission then costs no round trip.
type limitGate struct {
	rdb    redis.UniversalClient
	key    string
	exists *redis.IntCmd
}

// Process sends cmd and the EXISTS in one round trip. Its error is the
// first of either; each command's own is on it.
func (g *limitGate) Process(ctx context.Context, cmd redis.Cmder) error {
	p := g.rdb.Pipeline()
	_ = p.Process(ctx, cmd)
	g.exists = p.Exists(ctx, g.key)
	return script.Exec(ctx, p)
}

// limited reports whether the entries read must go through admission: the
// queue has limits, or the EXISTS got no answer.
func (g *limitGate) limited() bool {
	return g.exists == nil || g.exists.Err() != nil || g.exists.Val() > 0
}

// admit runs admit.lua over msgs, the entries one XREADGROUP ... > read
// (ascending), and returns those to hand out: the entries that took their
// slots, or all of them when the queue has no limits.
//
// When the call fails, the entries stay pending for this consumer, none
// handed out, whether or not they took slots: the consumer is marked as
// after a lost read, and its next round hands them back (lost.go), which
// gives back any slot they hold.
func (c *consumer) admit(ctx context.Context, msgs []redis.XMessage) ([]redis.XMessage, error) {
	k := c.keys
	args := make([]any, 0, 4+len(msgs))
	args = append(args, c.d.cfg.Group, c.name, msgs[0].ID, msgs[len(msgs)-1].ID)
	for _, m := range msgs {
		args = append(args, m.ID)
	}
	v, err := admitScript.Run(ctx, c.d.rdb, slices.Concat([]string{k.stream, k.wake, k.canceled}, k.groups.List(), k.limits.List()), args...)
	skip, ok := v.([]any)
	if err == nil && !ok {
		err = fmt.Errorf("%s: unexpected reply %v", admitScript.Name(), v)
	}
	if err != nil {
		c.mu.Lock()
		c.lost = "their admission failed (" + err.Error() + ")"
		c.mu.Unlock()
		return nil, err
	}
	if len(skip) == 0 {
		return msgs, nil
	}
	drop := make(map[string]bool, len(skip))
	for _, s := range skip {
		id, _ := s.(string)
		drop[id] = true
	}
	out := make([]redis.XMessage, 0, len(msgs))
	for _, m := range msgs {
		if !drop[m.ID] {
			out = append(out, m)
		}
	}
	return out, nil
}
