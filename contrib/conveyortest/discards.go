package conveyortest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
)

// The discard queue keeps records in Conveyor's stored encoding
// (docs/redis-keys.md: "d1,<unix ms>,<len(reason)>:<reason><message>"),
// newest first, in a records store: in memory for users, in Redis for the
// conformance suite, which reads and writes the records itself. Every call
// runs under d.mu.

// records stores the discard records of each queue, newest first, and
// the counters of what retention dropped.
type records interface {
	// push adds rec at the newest end of queue's records and returns how
	// many the queue holds.
	push(ctx context.Context, queue, rec string) (int, error)
	// all returns queue's records, newest first.
	all(ctx context.Context, queue string) ([]string, error)
	// keepNewest drops all but the n newest records of queue.
	keepNewest(ctx context.Context, queue string, n int) error
	// replace makes recs, newest first, queue's records.
	replace(ctx context.Context, queue string, recs []string) error
	// add adds n to queue's counter (droppedByCount or droppedByAge).
	add(ctx context.Context, queue, counter string, n int64) error
	// counter returns queue's counter.
	counter(ctx context.Context, queue, counter string) (int64, error)
	// drop deletes queue's records and counters and returns how many
	// Redis keys it deleted (0 for a store in memory).
	drop(ctx context.Context, queue string) (int64, error)
}

// The counters of a queue's discard records.
const (
	droppedByCount = "dead_dropped"
	droppedByAge   = "dead_expired"
)

// memRecords keeps the records in memory.
type memRecords struct {
	recs     map[string][]string // newest first
	counters map[string]int64    // queue + "\x00" + counter
}

func newMemRecords() *memRecords {
	return &memRecords{recs: map[string][]string{}, counters: map[string]int64{}}
}

func (m *memRecords) push(_ context.Context, queue, rec string) (int, error) {
	m.recs[queue] = slices.Insert(m.recs[queue], 0, rec)
	return len(m.recs[queue]), nil
}

func (m *memRecords) all(_ context.Context, queue string) ([]string, error) {
	return slices.Clone(m.recs[queue]), nil
}

func (m *memRecords) keepNewest(_ context.Context, queue string, n int) error {
	m.recs[queue] = m.recs[queue][:min(n, len(m.recs[queue]))]
	return nil
}

func (m *memRecords) replace(_ context.Context, queue string, recs []string) error {
	m.recs[queue] = slices.Clone(recs)
	return nil
}

func (m *memRecords) add(_ context.Context, queue, counter string, n int64) error {
	m.counters[queue+"\x00"+counter] += n
	return nil
}

func (m *memRecords) counter(_ context.Context, queue, counter string) (int64, error) {
	return m.counters[queue+"\x00"+counter], nil
}

func (m *memRecords) drop(_ context.Context, queue string) (int64, error) {
	delete(m.recs, queue)
	delete(m.counters, queue+"\x00"+droppedByCount)
	delete(m.counters, queue+"\x00"+droppedByAge)
	return 0, nil
}

// discardLocked keeps e's message as a discard record with reason and
// enforces the retention; d.mu is held.
func (d *Driver) discardLocked(e *entry, reason string, now time.Time) error {
	rec := fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
	rec = codec.Append(rec, &e.msg, 0)
	ctx := context.Background()
	n, err := d.recs.push(ctx, e.msg.Queue, string(rec))
	if err != nil {
		return err
	}
	if n > d.maxRec {
		if err := d.recs.keepNewest(ctx, e.msg.Queue, d.maxRec); err != nil {
			return err
		}
		if err := d.recs.add(ctx, e.msg.Queue, droppedByCount, int64(n-d.maxRec)); err != nil {
			return err
		}
	}
	_, err = d.readDiscards(ctx, e.msg.Queue)
	return err
}

// recordTime returns when rec was made; ok is false when it has no time.
func recordTime(rec string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(rec, "d1,")
	if !ok {
		return time.Time{}, false
	}
	ms, _, ok := strings.Cut(rest, ",")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

// readDiscards drops queue's records older than the age limit and
// returns the others, newest first; d.mu is held.
func (d *Driver) readDiscards(ctx context.Context, queue string) ([]string, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	recs, err := d.recs.all(ctx, queue)
	if err != nil {
		return nil, err
	}
	cutoff := d.Now().Add(-d.maxAge)
	keep := len(recs)
	for keep > 0 {
		if at, ok := recordTime(recs[keep-1]); ok && !at.Before(cutoff) {
			break
		}
		keep--
	}
	if keep == len(recs) {
		return recs, nil
	}
	if err := d.recs.keepNewest(ctx, queue, keep); err != nil {
		return nil, err
	}
	if err := d.recs.add(ctx, queue, droppedByAge, int64(len(recs)-keep)); err != nil {
		return nil, err
	}
	return recs[:keep], nil
}

// decodeDiscard turns a record into a broker.Discarded; ok is false when
// its message does not decode.
func decodeDiscard(queue, rec string) (*broker.Discarded, bool) {
	out := &broker.Discarded{Message: broker.Message{Queue: queue}}
	r, err := codec.DecodeDiscarded([]byte(rec))
	if err != nil {
		out.Raw = []byte(rec)
		return out, false
	}
	out.Reason, out.DiscardedAt = r.Reason, r.At
	if _, err := codec.Decode(r.Message, &out.Message); err != nil {
		out.Raw = r.Message
		return out, false
	}
	out.Queue = queue
	return out, true
}

// ListDiscarded returns up to limit records of queue from offset on,
// newest first, and how many the queue holds.
func (d *Driver) ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.Discarded, int64, error) {
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("conveyortest: list discarded: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, 0, err
	}
	sel := page(recs, offset, min(limit, maxPage))
	out := make([]*broker.Discarded, len(sel))
	for i, r := range sel {
		out[i], _ = decodeDiscard(queue, r)
	}
	return out, int64(len(recs)), nil
}

// GetDiscarded returns the newest record of message id in queue, nil when
// there is none.
func (d *Driver) GetDiscarded(ctx context.Context, queue, id string) (*broker.Discarded, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if x, _ := decodeDiscard(queue, r); x.ID == id {
			return x, nil
		}
	}
	return nil, nil
}

// Redrive moves the records f selects, oldest first, up to max (0: all),
// back to queue's ready list with their attempts reset.
func (d *Driver) Redrive(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	taken, err := d.takeDiscards(ctx, queue, f, max, true)
	if err != nil || len(taken) == 0 {
		return 0, err
	}
	q := d.queue(queue)
	for _, x := range taken {
		m := x.Message
		m.Retries, m.Recoveries = 0, 0
		q.ready = append(q.ready, d.newEntry(&m))
	}
	q.notify()
	return len(taken), nil
}

// PurgeDiscarded deletes the records f selects, oldest first, up to max
// (0: all).
func (d *Driver) PurgeDiscarded(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	taken, err := d.takeDiscards(ctx, queue, f, max, false)
	return len(taken), err
}

// takeDiscards removes the records f selects, oldest first, up to max (0:
// all), and returns them. A re-drive leaves the records whose message
// does not decode. d.mu is held.
func (d *Driver) takeDiscards(ctx context.Context, queue string, f broker.DiscardFilter, max int, redrive bool) ([]*broker.Discarded, error) {
	if max < 0 {
		return nil, fmt.Errorf("conveyortest: max %d is negative", max)
	}
	recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, err
	}
	var taken []*broker.Discarded
	keep := make([]string, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- { // oldest first
		x, ok := decodeDiscard(queue, recs[i])
		selected := (f.ID == "" || (ok && x.ID == f.ID)) && (f.Kind == "" || (ok && x.Kind == f.Kind))
		if selected && (ok || !redrive) && (max == 0 || len(taken) < max) {
			taken = append(taken, x)
			continue
		}
		keep = append(keep, recs[i])
	}
	if len(taken) == 0 {
		return nil, nil
	}
	slices.Reverse(keep)
	return taken, d.recs.replace(ctx, queue, keep)
}

// DiscardStats returns the figures of queue's discard queue.
func (d *Driver) DiscardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.discardStats(ctx, queue)
}

// discardStats returns the figures of queue's discard queue; d.mu is held.
func (d *Driver) discardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return broker.DiscardStats{}, err
	}
	s := broker.DiscardStats{Count: int64(len(recs)), MaxCount: d.maxRec, MaxAge: d.maxAge}
	if len(recs) > 0 {
		s.Oldest, _ = recordTime(recs[len(recs)-1])
	}
	if s.DroppedByCount, err = d.recs.counter(ctx, queue, droppedByCount); err != nil {
		return s, err
	}
	s.DroppedByAge, err = d.recs.counter(ctx, queue, droppedByAge)
	return s, err
}
