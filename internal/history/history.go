// Package history holds what the list and stream drivers share about a
// queue's history (broker.Historian): the STREAM <prefix>:{<queue>}:history
// of samples of the queue's sizes and counters, one per interval, which
// the queue's keeper records and dashboards read.
//
// docs/redis-keys.md describes the key.
package history

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Key returns the history key of queue under prefix.
func Key(prefix, queue string) string { return keys.Queue(prefix, queue).Part("history") }

var (
	//go:embed lua/record.lua
	recordLua    string
	recordScript = script.New("history.record", recordLua)
)

// Record stores s in the history at key (broker.Historian.RecordSample).
// The script is safe to run twice: go-redis may send it again after a
// lost reply, and the second run finds the interval taken.
func Record(ctx context.Context, c script.Processor, key string, s broker.QueueSizes, every, keep time.Duration) (broker.Recorded, error) {
	if err := broker.ValidateQueue(s.Queue); err != nil {
		return broker.Recorded{}, err
	}
	if err := broker.ValidateHistory(every, keep); err != nil {
		return broker.Recorded{}, err
	}
	v, err := recordScript.Run(ctx, c, []string{key}, every.Milliseconds(), keep.Milliseconds(),
		s.Ready, s.InFlight, s.Delayed, s.Discarded, s.Grouped, s.Limited, s.Processed, s.Failed)
	if err != nil {
		return broker.Recorded{}, fmt.Errorf("conveyor: history of queue %q: %w", s.Queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return broker.Recorded{}, fmt.Errorf("conveyor: history of queue %q: record.lua replied %v", s.Queue, v)
	}
	at, _ := r[0].(int64)
	stored, _ := r[1].(int64)
	next, _ := r[2].(int64)
	return broker.Recorded{At: time.UnixMilli(at), Stored: stored == 1, Next: time.Duration(next) * time.Millisecond}, nil
}

// Read returns the samples at key taken at or after since, oldest first:
// the newest broker.MaxHistory of them. One XREVRANGE.
func Read(ctx context.Context, c redis.Cmdable, key string, since time.Time) ([]broker.Sample, error) {
	out, err := samples(c.XRevRangeN(ctx, key, "+", minID(since), broker.MaxHistory).Result())
	if err != nil {
		return nil, fmt.Errorf("conveyor: history: %s: %w", key, err)
	}
	return out, nil
}

// minID is the lowest entry ID of the samples taken at or after since.
func minID(since time.Time) string {
	if ms := since.UnixMilli(); ms > 0 {
		return strconv.FormatInt(ms, 10)
	}
	return "-"
}

// samples reads the reply of an XREVRANGE of a history, oldest first.
func samples(msgs []redis.XMessage, err error) ([]broker.Sample, error) {
	if err != nil {
		return nil, err
	}
	out := make([]broker.Sample, len(msgs))
	for k, m := range msgs {
		s, err := parse(m)
		if err != nil {
			return nil, err
		}
		out[len(msgs)-1-k] = s
	}
	return out, nil
}

// parse reads one history entry. A missing field reads as 0; a field that
// is not a number is an error.
func parse(m redis.XMessage) (broker.Sample, error) {
	ms, _, _ := strings.Cut(m.ID, "-")
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return broker.Sample{}, fmt.Errorf("entry ID %q", m.ID)
	}
	s := broker.Sample{At: time.UnixMilli(at)}
	for name, to := range map[string]*int64{
		"r": &s.Ready, "f": &s.InFlight, "d": &s.Delayed, "x": &s.Discarded,
		"g": &s.Grouped, "l": &s.Limited, "p": &s.Processed, "e": &s.Failed,
	} {
		v, ok := m.Values[name]
		if !ok {
			continue
		}
		str, _ := v.(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return broker.Sample{}, fmt.Errorf("entry %s: field %s is %q, not a number", m.ID, name, v)
		}
		*to = n
	}
	return s, nil
}

// ReadMany reads the samples since of each key in one pipeline (on a
// Cluster, one per master), in the order of keys. A key that cannot be
// read (not a history, a sample that does not parse) has no samples, and
// the error, joined with the others', names it: the caller shows what it
// has. A failed pipeline returns no samples.
func ReadMany(ctx context.Context, c redis.UniversalClient, keys []string, since time.Time) ([][]broker.Sample, error) {
	min := minID(since)
	cmds := make([]*redis.XMessageSliceCmd, len(keys))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, key := range keys {
			cmds[k] = p.XRevRangeN(ctx, key, "+", min, broker.MaxHistory)
		}
		return nil
	})
	out := make([][]broker.Sample, len(keys))
	var errs []error
	for k, cmd := range cmds {
		s, err := samples(cmd.Result())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", keys[k], err))
		}
		out[k] = s
	}
	if err != nil && len(errs) == len(keys) {
		return nil, fmt.Errorf("conveyor: history: %w", err)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("conveyor: history: %w", errors.Join(errs...))
	}
	return out, nil
}

// Rate is how many jobs a queue processed and failed per minute over a
// span of its history.
type Rate struct {
	Processed, Failed float64
	// Span is the time between the first and last samples used; 0 when
	// fewer than two samples were there, and the rates mean nothing.
	Span time.Duration
	// Last is when the last sample used was taken.
	Last time.Time
}

// RateOf returns the rates over samples (oldest first): the change of
// the cumulative counters from the first to the last, per minute. A
// counter that went back (the queue was deleted and began again) counts
// from 0.
func RateOf(samples []broker.Sample) Rate {
	if len(samples) < 2 {
		return Rate{}
	}
	first, last := samples[0], samples[len(samples)-1]
	span := last.At.Sub(first.At)
	if span <= 0 {
		return Rate{}
	}
	perMin := func(n int64) float64 { return float64(n) * float64(time.Minute) / float64(span) }
	return Rate{
		Processed: perMin(grown(first.Processed, last.Processed)),
		Failed:    perMin(grown(first.Failed, last.Failed)),
		Span:      span,
		Last:      last.At,
	}
}

// DefaultEvery is the default interval between two samples
// (worker.DefaultHistoryEvery).
const DefaultEvery = time.Minute

// RateOver returns the rate over the samples (oldest first) of the window
// that ends at the newest one, leaving out those taken before now less
// the window and DefaultEvery (how old the newest sample may be), so that
// a history that stopped long ago has no rate.
func RateOver(samples []broker.Sample, now time.Time, window time.Duration) Rate {
	if len(samples) == 0 {
		return Rate{}
	}
	from := samples[len(samples)-1].At.Add(-window)
	if early := now.Add(-window - DefaultEvery); early.After(from) {
		from = early
	}
	k, _ := slices.BinarySearchFunc(samples, from, func(s broker.Sample, t time.Time) int { return s.At.Compare(t) })
	return RateOf(samples[k:])
}

// grown is how much a cumulative counter grew from a to b.
func grown(a, b int64) int64 {
	if b < a {
		return b
	}
	return b - a
}
