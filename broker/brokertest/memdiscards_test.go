package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
)

// The reference driver's discard queue follows the layout the suite reads
// and writes (docs/redis-keys.md): <prefix>:{<queue>}:dead, a LIST of
// records newest first, with the counters dead_dropped (count cap) and
// dead_expired (age limit). It is plain Go over plain commands, serialised
// by d.dmu: obviously right, not atomic against other processes. Its
// retention differs from the Redis drivers' defaults, so the suite must
// read it from DiscardStats.
var _ broker.Discards = (*memDriver)(nil)

const (
	memDiscardMax    = 5000
	memDiscardMaxAge = 24 * time.Hour
	memPage          = 1000
)

type memDiscardKeys struct{ dead, dropped, expired string }

func (d *memDriver) discardKeys(queue string) memDiscardKeys {
	q := keys.Queue(d.prefix, queue)
	return memDiscardKeys{q.Part("dead"), q.Part("dead_dropped"), q.Part("dead_expired")}
}

// keepDiscard adds rec to queue's records and enforces the retention.
func (d *memDriver) keepDiscard(ctx context.Context, queue string, rec []byte) error {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	k := d.discardKeys(queue)
	if err := d.rdb.LPush(ctx, k.dead, rec).Err(); err != nil {
		return err
	}
	if err := d.expireDiscards(ctx, k); err != nil {
		return err
	}
	if d.mutant == "nocountcap" {
		return nil
	}
	n, err := d.rdb.LLen(ctx, k.dead).Result()
	if err != nil || n <= memDiscardMax {
		return err
	}
	if err := d.rdb.LTrim(ctx, k.dead, 0, memDiscardMax-1).Err(); err != nil {
		return err
	}
	return d.rdb.IncrBy(ctx, k.dropped, n-memDiscardMax).Err()
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

// expireDiscards drops the records older than memDiscardMaxAge; d.dmu is
// held.
func (d *memDriver) expireDiscards(ctx context.Context, k memDiscardKeys) error {
	if d.mutant == "noage" {
		return nil
	}
	counter := k.expired
	if d.mutant == "agecountedascap" {
		counter = k.dropped
	}
	cutoff := time.Now().Add(-memDiscardMaxAge)
	for {
		rec, err := d.rdb.LIndex(ctx, k.dead, -1).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		if at, ok := recordTime(rec); !ok || !at.Before(cutoff) {
			return nil
		}
		if err := d.rdb.RPop(ctx, k.dead).Err(); err != nil {
			return err
		}
		if err := d.rdb.Incr(ctx, counter).Err(); err != nil {
			return err
		}
	}
}

// readDiscards returns queue's records, newest first, after the age
// limit; d.dmu is held.
func (d *memDriver) readDiscards(ctx context.Context, queue string) (memDiscardKeys, []string, error) {
	if err := d.checkQueue(queue); err != nil {
		return memDiscardKeys{}, nil, err
	}
	k := d.discardKeys(queue)
	if err := d.expireDiscards(ctx, k); err != nil {
		return k, nil, err
	}
	recs, err := d.rdb.LRange(ctx, k.dead, 0, -1).Result()
	return k, recs, err
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
	return out, true
}

func (d *memDriver) ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.Discarded, int64, error) {
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("mem: list discarded: offset %d, limit %d", offset, limit)
	}
	d.dmu.Lock()
	defer d.dmu.Unlock()
	_, recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, 0, err
	}
	total := int64(len(recs))
	if d.mutant == "listoldestfirst" {
		for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
			recs[i], recs[j] = recs[j], recs[i]
		}
	}
	recs = recs[min(offset, len(recs)):min(offset+min(limit, memPage), len(recs))]
	out := make([]*broker.Discarded, len(recs))
	for i, r := range recs {
		out[i], _ = decodeDiscard(queue, r)
	}
	return out, total, nil
}

func (d *memDriver) GetDiscarded(ctx context.Context, queue, id string) (*broker.Discarded, error) {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	_, recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, err
	}
	if d.mutant == "getfirstpage" {
		recs = recs[:min(len(recs), memPage)]
	}
	for _, r := range recs {
		if x, _ := decodeDiscard(queue, r); x.ID == id {
			return x, nil
		}
	}
	return nil, nil
}

func (d *memDriver) Redrive(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	taken, err := d.takeDiscards(ctx, queue, f, max, true)
	if err != nil || len(taken) == 0 {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	for _, x := range taken {
		m := x.Message
		if d.mutant != "redrivekeepsattempt" {
			m.Retries, m.Recoveries = 0, 0
		}
		q.ready = append(q.ready, d.newEntry(&m))
	}
	q.notify()
	return len(taken), nil
}

func (d *memDriver) PurgeDiscarded(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	taken, err := d.takeDiscards(ctx, queue, f, max, false)
	return len(taken), err
}

// takeDiscards removes the records f selects, oldest first, up to max (0:
// all), and returns them. A re-drive leaves the records whose message does
// not decode.
func (d *memDriver) takeDiscards(ctx context.Context, queue string, f broker.DiscardFilter, max int, redrive bool) ([]*broker.Discarded, error) {
	if max < 0 {
		return nil, fmt.Errorf("mem: max %d is negative", max)
	}
	if d.mutant == "onepage" && (max == 0 || max > memPage) {
		max = memPage
	}
	if d.mutant == "redriveignoreskind" && redrive {
		f.Kind = ""
	}
	if d.mutant == "purgeignoresid" && !redrive {
		f.ID = ""
	}
	d.dmu.Lock()
	defer d.dmu.Unlock()
	k, recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return nil, err
	}
	var taken []*broker.Discarded
	keep := make([]string, 0, len(recs)) // oldest first
	for i := len(recs) - 1; i >= 0; i-- {
		x, ok := decodeDiscard(queue, recs[i])
		selected := (f.ID == "" || (ok && x.ID == f.ID)) && (f.Kind == "" || (ok && x.Kind == f.Kind))
		if selected && (ok || !redrive) && (max == 0 || len(taken) < max) {
			taken = append(taken, x)
			if d.mutant == "redrivekeepsrecord" && redrive {
				keep = append(keep, recs[i])
			}
			continue
		}
		keep = append(keep, recs[i])
	}
	if len(taken) == 0 {
		return nil, nil
	}
	_, err = d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, k.dead)
		for i := 0; i < len(keep); i += 1000 {
			args := make([]any, 0, 1000)
			for _, r := range keep[i:min(i+1000, len(keep))] {
				args = append(args, r)
			}
			p.LPush(ctx, k.dead, args...)
		}
		return nil
	})
	return taken, err
}

func (d *memDriver) DiscardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	k, recs, err := d.readDiscards(ctx, queue)
	if err != nil {
		return broker.DiscardStats{}, err
	}
	s := broker.DiscardStats{Count: int64(len(recs)), MaxCount: memDiscardMax, MaxAge: memDiscardMaxAge}
	if len(recs) > 0 {
		s.Oldest, _ = recordTime(recs[len(recs)-1])
	}
	for _, c := range []struct {
		key string
		to  *int64
	}{{k.dropped, &s.DroppedByCount}, {k.expired, &s.DroppedByAge}} {
		n, err := d.rdb.Get(ctx, c.key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return s, err
		}
		*c.to = n
	}
	return s, nil
}
