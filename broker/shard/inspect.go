package shard

import (
	"context"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor/broker"
)

// Inspector

// Queues lists the queues of the inner driver, each sharded queue once
// under its own name instead of its partitions'.
func (d *Driver) Queues(ctx context.Context) ([]string, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return nil, err
	}
	qs, err := in.Queues(ctx)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(qs))
	out := qs[:0]
	for _, q := range qs {
		l := d.Logical(q)
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out, nil
}

// QueueSizes reads every partition of queues in one call of the inner
// driver and adds their sizes up, queue by queue.
func (d *Driver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, err
		}
		all = append(all, d.Partitions(q)...)
	}
	sizes, err := in.QueueSizes(ctx, all...)
	if err != nil {
		return nil, err
	}
	out := make([]broker.QueueSizes, len(queues))
	i := 0
	for qi, q := range queues {
		n := len(d.Partitions(q))
		out[qi] = sumSizes(q, sizes[i:i+n])
		i += n
	}
	return out, nil
}

func sumSizes(queue string, ss []broker.QueueSizes) broker.QueueSizes {
	if len(ss) == 1 {
		s := ss[0]
		s.Queue = queue
		return s
	}
	out := broker.QueueSizes{Queue: queue}
	var ds []broker.DiscardStats
	for _, s := range ss {
		out.Ready += s.Ready
		out.InFlight += s.InFlight
		out.Delayed += s.Delayed
		out.Discarded += s.Discarded
		out.Grouped += s.Grouped
		out.Limited += s.Limited
		out.Processed += s.Processed
		out.Failed += s.Failed
		ds = append(ds, s.Discards)
	}
	out.Discards = sumDiscardStats(ds)
	return out
}

func sumDiscardStats(ss []broker.DiscardStats) broker.DiscardStats {
	var out broker.DiscardStats
	for _, s := range ss {
		out.Count += s.Count
		out.DroppedByCount += s.DroppedByCount
		out.DroppedByAge += s.DroppedByAge
		if !s.Oldest.IsZero() && (out.Oldest.IsZero() || s.Oldest.Before(out.Oldest)) {
			out.Oldest = s.Oldest
		}
		// The retention is the inner driver's, the same in each partition.
		out.MaxCount, out.MaxAge = s.MaxCount, s.MaxAge
	}
	return out
}

// ListJobs merges the partitions' pages: ready jobs oldest enqueued first,
// in flight by lease deadline, delayed by due time, discarded newest first,
// finished by expiry, the latest first.
func (d *Driver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return nil, 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	return listQueue(d, queue, offset, limit, func(p string, o, l int) ([]*broker.JobInfo, int64, error) {
		return in.ListJobs(ctx, p, state, o, l)
	}, jobOrder(state), func(j *broker.JobInfo) {
		j.Queue = queue
		if j.Record != nil {
			j.Record.Queue = queue
		}
	})
}

func jobOrder(state broker.JobState) func(a, b *broker.JobInfo) int {
	switch state {
	case broker.JobInFlight:
		return func(a, b *broker.JobInfo) int { return a.LeaseDeadline.Compare(b.LeaseDeadline) }
	case broker.JobDelayed:
		return func(a, b *broker.JobInfo) int { return a.RunAt.Compare(b.RunAt) }
	case broker.JobDiscarded:
		return func(a, b *broker.JobInfo) int { return b.DiscardedAt.Compare(a.DiscardedAt) }
	case broker.JobFinished:
		return func(a, b *broker.JobInfo) int {
			if a.Record == nil || b.Record == nil {
				return 0
			}
			return b.Record.ExpiresAt.Compare(a.Record.ExpiresAt)
		}
	}
	return func(a, b *broker.JobInfo) int {
		if c := a.EnqueuedAt.Compare(b.EnqueuedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	}
}

func (d *Driver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	j, err := findFirst(ctx, d, queue, id, func(p string) (*broker.JobInfo, error) { return in.FindJob(ctx, p, state, id) }, func(j *broker.JobInfo) bool { return j != nil })
	if j != nil {
		j.Queue = queue
		if j.Record != nil {
			j.Record.Queue = queue
		}
	}
	return j, err
}

func (d *Driver) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return eachUpTo(d.Partitions(queue), max, func(p string, max int) (int, error) { return in.PurgeReady(ctx, p, max) })
}

func (d *Driver) PurgeDelayed(ctx context.Context, queue string, max int) (int, error) {
	in, err := inner[broker.Inspector](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 || max <= 0 {
		return eachUpTo(ps, max, func(p string, max int) (int, error) { return in.PurgeDelayed(ctx, p, max) })
	}
	// The earliest max timers of the queue: count how many of them each
	// partition holds, then purge that many, earliest first, in each.
	t, err := inner[broker.Timers](d)
	if err != nil {
		return 0, err
	}
	type timer struct {
		k int
		m *broker.Message
	}
	first, _, err := mergeWalk(ps, 0, max, func(p string, o, l int) ([]timer, int64, error) {
		ms, n, err := t.PendingTimers(ctx, p, o, l)
		out := make([]timer, len(ms))
		for i, m := range ms {
			out[i] = timer{slices.Index(ps, p), m}
		}
		return out, n, err
	}, func(a, b timer) int { return a.m.RunAt.Compare(b.m.RunAt) })
	if err != nil {
		return 0, err
	}
	counts := make([]int, len(ps))
	for _, x := range first {
		counts[x.k]++
	}
	done := 0
	for k, p := range ps {
		if counts[k] == 0 {
			continue
		}
		n, err := in.PurgeDelayed(ctx, p, counts[k])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// eachUpTo runs f on each partition with what is left of max (max <= 0:
// no limit) and adds up what they did.
func eachUpTo(ps []string, max int, f func(p string, max int) (int, error)) (int, error) {
	done := 0
	for _, p := range ps {
		left := max
		if max > 0 {
			left = max - done
			if left <= 0 {
				break
			}
		}
		n, err := f(p, left)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Discards

func (d *Driver) ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.Discarded, int64, error) {
	ds, err := inner[broker.Discards](d)
	if err != nil {
		return nil, 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	return listQueue(d, queue, offset, limit, func(p string, o, l int) ([]*broker.Discarded, int64, error) {
		return ds.ListDiscarded(ctx, p, o, l)
	}, func(a, b *broker.Discarded) int { return b.DiscardedAt.Compare(a.DiscardedAt) }, func(r *broker.Discarded) { r.Queue = queue })
}

func (d *Driver) GetDiscarded(ctx context.Context, queue, id string) (*broker.Discarded, error) {
	ds, err := inner[broker.Discards](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	r, err := findFirst(ctx, d, queue, id, func(p string) (*broker.Discarded, error) { return ds.GetDiscarded(ctx, p, id) }, func(r *broker.Discarded) bool { return r != nil })
	if r != nil {
		r.Queue = queue
	}
	return r, err
}

func (d *Driver) Redrive(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	ds, err := inner[broker.Discards](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return eachUpTo(d.Partitions(queue), max, func(p string, max int) (int, error) { return ds.Redrive(ctx, p, f, max) })
}

func (d *Driver) PurgeDiscarded(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	ds, err := inner[broker.Discards](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return eachUpTo(d.Partitions(queue), max, func(p string, max int) (int, error) { return ds.PurgeDiscarded(ctx, p, f, max) })
}

func (d *Driver) DiscardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	ds, err := inner[broker.Discards](d)
	if err != nil {
		return broker.DiscardStats{}, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.DiscardStats{}, err
	}
	var all []broker.DiscardStats
	for _, p := range d.Partitions(queue) {
		s, err := ds.DiscardStats(ctx, p)
		if err != nil {
			return broker.DiscardStats{}, err
		}
		all = append(all, s)
	}
	return sumDiscardStats(all), nil
}

// Records

func (d *Driver) GetRecord(ctx context.Context, queue, id string) (*broker.JobRecord, error) {
	rs, err := inner[broker.Records](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	r, err := findFirst(ctx, d, queue, id, func(p string) (*broker.JobRecord, error) { return rs.GetRecord(ctx, p, id) }, func(r *broker.JobRecord) bool { return r != nil })
	if r != nil {
		r.Queue = queue
	}
	return r, err
}

func (d *Driver) ListRecords(ctx context.Context, queue string, offset, limit int) ([]*broker.JobRecord, int64, error) {
	rs, err := inner[broker.Records](d)
	if err != nil {
		return nil, 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	return listQueue(d, queue, offset, limit, func(p string, o, l int) ([]*broker.JobRecord, int64, error) {
		return rs.ListRecords(ctx, p, o, l)
	}, func(a, b *broker.JobRecord) int { return b.ExpiresAt.Compare(a.ExpiresAt) }, func(r *broker.JobRecord) { r.Queue = queue })
}

func (d *Driver) RecordStats(ctx context.Context, queue string) (broker.RecordStats, error) {
	rs, err := inner[broker.Records](d)
	if err != nil {
		return broker.RecordStats{}, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.RecordStats{}, err
	}
	var out broker.RecordStats
	for _, p := range d.Partitions(queue) {
		s, err := rs.RecordStats(ctx, p)
		if err != nil {
			return broker.RecordStats{}, err
		}
		out.Count += s.Count
		out.Expired += s.Expired
		out.DroppedByCount += s.DroppedByCount
		out.MaxCount = s.MaxCount
	}
	return out, nil
}

// QueueDeleter

// DeleteQueue deletes every partition of queue, then the queue's own keys
// (its recorded partition count, its history). Unless force is set it
// first refuses a queue with jobs in flight in any partition.
func (d *Driver) DeleteQueue(ctx context.Context, queue string, force bool) (broker.QueueDeletion, error) {
	del, err := inner[broker.QueueDeleter](d)
	if err != nil {
		return broker.QueueDeletion{}, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.QueueDeletion{}, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		out, err := del.DeleteQueue(ctx, queue, force)
		d.forget(queue)
		return out, err
	}
	if !force {
		sizes, err := d.QueueSizes(ctx, queue)
		if err != nil {
			return broker.QueueDeletion{}, err
		}
		if n := sizes[0].InFlight; n > 0 {
			return broker.QueueDeletion{Queue: queue}, &broker.InFlightError{Queue: queue, InFlight: n}
		}
	}
	out := broker.QueueDeletion{Queue: queue}
	for _, p := range append(slices.Clone(ps), queue) {
		r, err := del.DeleteQueue(ctx, p, force)
		out.Ready += r.Ready
		out.InFlight += r.InFlight
		out.Delayed += r.Delayed
		out.Discarded += r.Discarded
		out.Keys += r.Keys
		out.Registered = out.Registered || r.Registered
		if err != nil {
			return out, d.outerErr(err, nil, nil)
		}
	}
	d.forget(queue)
	return out, nil
}

// forget drops what the Driver remembers of queue's recorded count.
func (d *Driver) forget(queue string) {
	d.mu.Lock()
	delete(d.checked, queue)
	d.mu.Unlock()
}

var (
	_ broker.Inspector      = (*Driver)(nil)
	_ broker.Timers         = (*Driver)(nil)
	_ broker.CronLister     = (*Driver)(nil)
	_ broker.Canceler       = (*Driver)(nil)
	_ broker.Pauser         = (*Driver)(nil)
	_ broker.Limiter        = (*Driver)(nil)
	_ broker.Keeper         = (*Driver)(nil)
	_ broker.Upkeeper       = (*Driver)(nil)
	_ broker.Historian      = (*Driver)(nil)
	_ broker.WorkerRegistry = (*Driver)(nil)
	_ broker.Discards       = (*Driver)(nil)
	_ broker.Records        = (*Driver)(nil)
	_ broker.QueueDeleter   = (*Driver)(nil)
)
