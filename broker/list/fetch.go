package list

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/script"
)

// fetchOnce runs fetch.lua once. With no delivery it returns how long the
// caller may wait before something could become due (-1: nothing known).
func (c *consumer) fetchOnce(ctx context.Context, max int) ([]*broker.Delivery, time.Duration, error) {
	c.handBackLost(ctx)
	t := &c.fetchTail
	tok := c.nextToken()
	// The lease runs out vt after the script read the server's clock, which
	// is after this moment: a deadline from the local monotonic clock, taken
	// before sending, is never later than the server's, whatever the skew
	// between the two machines' wall clocks.
	sent := time.Now()
	v, err := fetchScript.Run(ctx, c.d.client, c.k.fetch, max, t[0], t[1], t[2], t[3], t[4], tok)
	if err != nil {
		if script.Unsure(err) {
			// The script may have leased a batch whose reply never came:
			// hand it back now, or before the next fetch.
			c.lostFetch(ctx, tok)
		}
		return nil, 0, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < 5 || len(reply)%2 == 0 {
		return nil, 0, fmt.Errorf("fetch.lua replied %T", v)
	}
	_, ok1 := reply[0].(int64) // the deadline by the server's clock, for the record
	hintMs, ok2 := reply[1].(int64)
	reclaimed, ok3 := reply[2].(int64)
	poisoned, ok4 := reply[3].(int64)
	malformed, ok5 := reply[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, 0, fmt.Errorf("fetch.lua replied %T, %T, %T, %T, %T", reply[0], reply[1], reply[2], reply[3], reply[4])
	}
	if reclaimed > 0 {
		c.d.log.InfoContext(ctx, "list: requeued messages whose lease ran out", "queue", c.queue, "count", reclaimed)
	}
	c.d.logPoisoned(ctx, c.queue, poisoned)
	if malformed > 0 {
		// fetch.lua moved them to the discard list: it cannot read their
		// header, so neither can anyone else.
		c.d.log.ErrorContext(ctx, "list: undecodable messages discarded", "queue", c.queue, "count", malformed,
			"error", codec.ErrMalformed.Error()+": unreadable header")
	}
	vals := reply[5:]
	if len(vals) == 0 {
		hint := time.Duration(-1)
		if hintMs >= 0 {
			hint = time.Duration(hintMs) * time.Millisecond
		}
		return nil, hint, nil
	}
	deadline := sent.Add(c.vt.Truncate(time.Millisecond))
	// One allocation for the batch's deliveries rather than one each.
	all := make([]broker.Delivery, len(vals)/2)
	out := make([]*broker.Delivery, 0, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		r, _ := vals[i].(string)
		s, _ := vals[i+1].(string)
		d := &all[i/2]
		d.Receipt = r
		d.Token = receiptToken(r)
		if _, err := codec.DecodeString(s, &d.Message); err != nil {
			c.discardUndecodable(ctx, d, s, err)
			continue
		}
		d.Queue = c.queue
		d.LeaseDeadline = deadline
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, 0, nil // all were discarded: look again at once
	}
	return out, 0, nil
}

// discardUndecodable moves a leased message that fetch.lua could read (its
// header, by its own pattern) but Go cannot (a counter of 11 digits, an ID
// length past the end, a body that does not decode) to the discard list at
// once, with the decode error as the reason, as the stream driver does:
// handing it out again would fail every consumer the same way, and leaving
// it leased would only end, after its lease ran out MaxRecoveries times, as
// poison under the wrong reason. d holds the receipt and token fetch.lua
// leased it under, so the fenced Discard takes it.
func (c *consumer) discardUndecodable(ctx context.Context, d *broker.Delivery, s string, decodeErr error) {
	attrs := []slog.Attr{slog.String("queue", c.queue)}
	if h, _, err := codec.ParseHeader([]byte(s)); err == nil {
		attrs = append(attrs, slog.String("job_id", h.ID))
	}
	attrs = attrs[:len(attrs):len(attrs)] // each log line appends its own error
	c.d.log.LogAttrs(ctx, slog.LevelError, "list: undecodable message discarded",
		append(attrs, slog.String("error", decodeErr.Error()))...)
	d.Message = broker.Message{Queue: c.queue}
	if err := c.Discard(ctx, d, decodeErr.Error()); err != nil {
		c.d.log.LogAttrs(ctx, slog.LevelError, "list: discard of undecodable message failed",
			append(attrs, slog.String("error", err.Error()))...)
	}
}
