package list

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
	c.drained.Store(err == nil) // unless the reply says ready still holds messages
	if err != nil {
		if script.Unsure(err) || script.RanInPart(err) {
			// The script may have leased a batch whose reply never came,
			// or failed after leasing it: hand it back now, or before the
			// next fetch.
			c.lostFetch(ctx, tok)
		}
		return nil, 0, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < fetchHead {
		return nil, 0, fmt.Errorf("fetch.lua replied %T", v)
	}
	_, ok1 := reply[0].(int64) // the deadline by the server's clock, for the record
	hintMs, ok2 := reply[1].(int64)
	reclaimed, ok3 := reply[2].(int64)
	poisoned, ok4 := reply[3].(int64)
	malformed, ok5 := reply[4].(int64)
	placed, ok6 := reply[5].(int64)
	more, ok7 := reply[6].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
		return nil, 0, fmt.Errorf("fetch.lua replied %T, %T, %T, %T, %T, %T, %T", reply[0], reply[1], reply[2], reply[3], reply[4], reply[5], reply[6])
	}
	if more == 1 {
		c.drained.Store(false)
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
	vals := reply[fetchHead:]
	if len(vals) == 0 {
		hint := time.Duration(-1)
		if hintMs >= 0 {
			hint = time.Duration(hintMs) * time.Millisecond
		}
		return nil, hint, nil
	}
	deadline := sent.Add(c.vt.Truncate(time.Millisecond))
	// One allocation for the batch's deliveries rather than one each, and
	// one for their receipts.
	all := make([]broker.Delivery, len(vals))
	receipts(tok, placed == 1, vals, all)
	out := make([]*broker.Delivery, 0, len(vals))
	for i, x := range vals {
		s, _ := x.(string)
		d := &all[i]
		if _, err := codec.DecodeString(s, &d.Message); err != nil {
			c.discardUndecodable(ctx, d, s, err)
			continue
		}
		d.Queue = c.queue
		d.LeaseDeadline = deadline
		d.LastChance = broker.IsLastChance(d.Recoveries, c.d.cfg.MaxRecoveries)
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, 0, nil // all were discarded: look again at once
	}
	return out, 0, nil
}

// fetchHead is the number of fields of fetch.lua's reply before the leased
// messages.
const fetchHead = 7

// receipts sets the Receipt and Token of ds[i], the delivery of the stored
// message vals[i] leased by the fetch with token tok, as fetch.lua made
// them: "<tok>,<len(id)>:<id>", or "<tok>.<i+1>,<len(id)>:<id>" when placed.
// All receipts share one string.
func receipts(tok string, placed bool, vals []any, ds []broker.Delivery) {
	var b strings.Builder
	size := 0
	for _, x := range vals {
		s, _ := x.(string)
		size += len(tok) + 1 + len(idTail(s)) + 6
	}
	b.Grow(size)
	ends := make([]int, len(vals))
	for i, x := range vals {
		s, _ := x.(string)
		b.WriteString(tok)
		if placed {
			b.WriteByte('.')
			b.WriteString(strconv.Itoa(i + 1))
		}
		b.WriteByte(',')
		b.WriteString(idTail(s))
		ends[i] = b.Len()
	}
	all, start := b.String(), 0
	for i := range ds {
		r := all[start:ends[i]]
		start = ends[i]
		ds[i].Receipt = r
		ds[i].Token = receiptToken(r)
	}
}

// idTail returns the "<len(id)>:<id>" of stored message s as fetch.lua cuts
// it: after the header's fourth comma, the digits, ':' and as many bytes as
// they say (fewer where s ends); "" when s has no such header.
func idTail(s string) string {
	p := 0
	for range 4 {
		i := strings.IndexByte(s[p:], ',')
		if i < 0 {
			return ""
		}
		p += i + 1
	}
	j := p
	for j < len(s) && '0' <= s[j] && s[j] <= '9' {
		j++
	}
	if j == p || j == len(s) || s[j] != ':' {
		return ""
	}
	end := len(s)
	if n, err := strconv.Atoi(s[p:j]); err == nil && n <= len(s)-j-1 {
		end = j + 1 + n
	}
	return s[p:end]
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
