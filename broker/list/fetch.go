package list

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
)

// fetchOnce runs fetch.lua once. With no delivery it returns how long the
// caller may wait before something could become due (-1: nothing known).
func (c *consumer) fetchOnce(ctx context.Context, max int) ([]*broker.Delivery, time.Duration, error) {
	t := &c.fetchTail
	v, err := fetchScript.Run(ctx, c.d.client, c.k.fetch, max, t[0], t[1], t[2], t[3], t[4])
	if err != nil {
		return nil, 0, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < 4 {
		return nil, 0, fmt.Errorf("fetch.lua replied %T", v)
	}
	deadlineMs, ok1 := reply[0].(int64)
	hintMs, ok2 := reply[1].(int64)
	reclaimed, ok3 := reply[2].(int64)
	poisoned, ok4 := reply[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, 0, fmt.Errorf("fetch.lua replied %T, %T, %T, %T", reply[0], reply[1], reply[2], reply[3])
	}
	if reclaimed > 0 {
		c.d.log.InfoContext(ctx, "list: requeued messages whose lease ran out", "queue", c.queue, "count", reclaimed)
	}
	c.d.logPoisoned(ctx, c.queue, poisoned)
	vals := reply[4:]
	if len(vals) == 0 {
		hint := time.Duration(-1)
		if hintMs >= 0 {
			hint = time.Duration(hintMs) * time.Millisecond
		}
		return nil, hint, nil
	}
	deadline := time.UnixMilli(deadlineMs)
	// One allocation for the batch's deliveries rather than one each.
	all := make([]broker.Delivery, len(vals))
	out := make([]*broker.Delivery, 0, len(vals))
	for i, x := range vals {
		s, _ := x.(string)
		d := &all[i]
		deliveries, err := codec.DecodeString(s, &d.Message)
		if err != nil {
			c.discardUndecodable(ctx, s, err)
			continue
		}
		d.Queue = c.queue
		// The stored value is the delivery's member of the lease ZSET:
		// settling names it. s is the reply's own string, kept, not copied.
		d.Receipt = s
		d.Token = strconv.Itoa(deliveries)
		d.LeaseDeadline = deadline
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, 0, nil // all were discarded: look again at once
	}
	return out, 0, nil
}

// discardUndecodable moves a leased message that Lua could read (its header)
// but Go cannot (its body) to the discard list: handing it back would fail
// every consumer forever.
func (c *consumer) discardUndecodable(ctx context.Context, s string, decodeErr error) {
	h, _, err := codec.ParseHeader([]byte(s))
	if err != nil {
		c.d.log.ErrorContext(ctx, "list: fetched a message with an unreadable header", "queue", c.queue, "error", err)
		return
	}
	reason := "conveyor: undecodable message: " + decodeErr.Error()
	d := &broker.Delivery{Message: broker.Message{ID: h.ID, Queue: c.queue}, Receipt: s, Token: strconv.Itoa(h.Deliveries)}
	if err := c.Discard(ctx, d, reason); err != nil {
		c.d.log.ErrorContext(ctx, "list: cannot discard an undecodable message", "queue", c.queue, "job_id", h.ID, "error", err)
		return
	}
	c.d.log.WarnContext(ctx, "list: discarded an undecodable message", "queue", c.queue, "job_id", h.ID, "error", decodeErr)
}
