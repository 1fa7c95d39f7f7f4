package shard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The optional broker interfaces on a logical queue. A whole queue's calls
// go to the inner driver as they are. A sharded queue's calls go to its
// partitions: a job looked up by ID is asked of the partition its ID routes
// to first (the partition of a job without a group or unique key), then of
// the others; lists merge the partitions' pages; counts add up.

func inner[T any](d *Driver) (T, error) {
	v, ok := d.d.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("%w: the inner driver %T does not implement %T", broker.ErrUnsupported, d.d, (*T)(nil))
	}
	return v, nil
}

// byIDOrder returns queue's partitions, the one id routes to first.
func (d *Driver) byIDOrder(queue, id string) []string {
	ps := d.Partitions(queue)
	k := byID(id, len(ps))
	out := make([]string, 0, len(ps))
	out = append(out, ps[k])
	for i, p := range ps {
		if i != k {
			out = append(out, p)
		}
	}
	return out
}

// findFirst asks each partition of queue, id's first, until found says
// its answer is final.
func findFirst[T any](ctx context.Context, d *Driver, queue, id string, ask func(p string) (T, error), found func(T) bool) (T, error) {
	var last T
	for _, p := range d.byIDOrder(queue, id) {
		v, err := ask(p)
		if err != nil || found(v) {
			return v, err
		}
		last = v
	}
	return last, nil
}

// listQueue returns a page of queue's list (list asks one queue, whole or
// a partition): the inner driver's own page for a whole queue; for a split
// one the partitions' pages merged in before order (mergePage), each entry
// renamed to the logical queue by rename.
func listQueue[T any](d *Driver, queue string, offset, limit int, list func(p string, offset, limit int) ([]T, int64, error), before func(a, b T) int, rename func(T)) ([]T, int64, error) {
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return list(queue, offset, limit)
	}
	out, n, err := mergePage(ps, offset, limit, list, before)
	for _, v := range out {
		rename(v)
	}
	return out, n, err
}

// mergePage returns the page [offset, offset+limit) of the partitions'
// lists merged in before order (ties go to the lower partition), and the
// sum of their totals. It walks the merge from its start, reading each
// partition in pages of up to broker.MaxInspectPage as the merge reaches
// them, so every page of one listing comes from the same order (no entry
// is shown twice or skipped while nothing changes) and a page at offset o
// reads about o+limit entries in all, plus at most one page per partition.
func mergePage[T any](ps []string, offset, limit int, list func(p string, offset, limit int) ([]T, int64, error), before func(a, b T) int) ([]T, int64, error) {
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return nil, 0, fmt.Errorf("conveyor: invalid page: offset %d, limit %d: want offset >= 0 and limit 1 to %d", offset, limit, broker.MaxInspectPage)
	}
	return mergeWalk(ps, offset, limit, list, before)
}

// mergeWalk walks the merge of the partitions' lists (see mergePage) past
// its first skip entries and returns the take entries after them.
func mergeWalk[T any](ps []string, skip, take int, list func(p string, offset, limit int) ([]T, int64, error), before func(a, b T) int) ([]T, int64, error) {
	offset := skip
	type cursor struct {
		buf  []T
		read int  // entries read from the partition so far
		done bool // nothing left to read
	}
	want := offset + take
	chunk := max(1, min(broker.MaxInspectPage, want))
	curs := make([]cursor, len(ps))
	var total int64
	fill := func(i int) error {
		c := &curs[i]
		page, n, err := list(ps[i], c.read, chunk)
		if err != nil {
			return err
		}
		if c.read == 0 {
			total += n
		}
		c.buf = append(c.buf, page...)
		c.read += len(page)
		c.done = len(page) < chunk || int64(c.read) >= n
		return nil
	}
	for i := range curs {
		if err := fill(i); err != nil {
			return nil, 0, err
		}
	}
	var out []T
	for taken := 0; taken < want; taken++ {
		best := -1
		for i := range curs {
			c := &curs[i]
			if len(c.buf) == 0 && !c.done {
				if err := fill(i); err != nil {
					return nil, 0, err
				}
			}
			if len(c.buf) > 0 && (best < 0 || before(c.buf[0], curs[best].buf[0]) < 0) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		v := curs[best].buf[0]
		curs[best].buf = curs[best].buf[1:]
		if taken >= offset {
			out = append(out, v)
		}
	}
	return out, total, nil
}

// Timers

func (d *Driver) Promote(ctx context.Context, queue string, most int) (broker.Promotion, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return broker.Promotion{}, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.Promotion{}, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return t.Promote(ctx, queue, most)
	}
	out := broker.Promotion{Next: -1}
	for _, p := range ps {
		pr, err := t.Promote(ctx, p, most)
		if err != nil {
			return out, err
		}
		out.Promoted += pr.Promoted
		out.Late = max(out.Late, pr.Late)
		if pr.Next >= 0 && (out.Next < 0 || pr.Next < out.Next) {
			out.Next = pr.Next
		}
	}
	return out, nil
}

func (d *Driver) Cancel(ctx context.Context, queue, id string) (bool, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return false, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return false, err
	}
	return findFirst(ctx, d, queue, id, func(p string) (bool, error) { return t.Cancel(ctx, p, id) }, func(ok bool) bool { return ok })
}

func (d *Driver) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return false, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return false, err
	}
	return findFirst(ctx, d, queue, id, func(p string) (bool, error) { return t.Reschedule(ctx, p, id, at) }, func(ok bool) bool { return ok })
}

func (d *Driver) PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*broker.Message, int64, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return nil, 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	return listQueue(d, queue, offset, limit, func(p string, o, l int) ([]*broker.Message, int64, error) {
		return t.PendingTimers(ctx, p, o, l)
	}, func(a, b *broker.Message) int { return a.RunAt.Compare(b.RunAt) }, func(m *broker.Message) { m.Queue = queue })
}

// WatchTimers merges the wake-ups of every partition.
func (d *Driver) WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return t.WatchTimers(ctx, queue)
	}
	ctx, cancel := context.WithCancel(ctx)
	chs := make([]<-chan struct{}, 0, len(ps))
	for _, p := range ps {
		ch, err := t.WatchTimers(ctx, p)
		if err != nil {
			cancel()
			return nil, err
		}
		chs = append(chs, ch)
	}
	return merge(ctx, cancel, chs, func(struct{}) struct{} { return struct{}{} }), nil
}

// merge forwards what every channel of chs receives, mapped by f, to the
// channel it returns, which it closes once they are all closed; cancel
// runs then.
func merge[T, U any](ctx context.Context, cancel context.CancelFunc, chs []<-chan T, f func(T) U) <-chan U {
	out := make(chan U, 1)
	done := make(chan struct{}, len(chs))
	for _, ch := range chs {
		go func() {
			defer func() { done <- struct{}{} }()
			for v := range ch {
				select {
				case out <- f(v):
				case <-ctx.Done():
				}
			}
		}()
	}
	go func() {
		for range chs {
			<-done
		}
		cancel()
		close(out)
	}()
	return out
}

// EnqueueFire stores a cron series' fire in the partition its series
// routes to, so that each series keeps its record in one partition.
func (d *Driver) EnqueueFire(ctx context.Context, series string, msg *broker.Message, keep time.Duration) (bool, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return false, err
	}
	if err := d.check(ctx, msg.Queue); err != nil {
		return false, err
	}
	ps := d.Partitions(msg.Queue)
	c := *msg
	c.Queue = ps[seriesIndex(series, len(ps))]
	ok, err := t.EnqueueFire(ctx, series, &c, keep)
	q := msg.Queue
	*msg = c
	msg.Queue = q
	return ok, d.outerErr(err, nil, nil)
}

func seriesIndex(series string, n int) int {
	if n == 1 {
		return 0
	}
	return hashIndex("c:"+series, n)
}

func (d *Driver) LastFire(ctx context.Context, queue, series string) (time.Time, bool, error) {
	t, err := inner[broker.Timers](d)
	if err != nil {
		return time.Time{}, false, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return time.Time{}, false, err
	}
	ps := d.Partitions(queue)
	return t.LastFire(ctx, ps[seriesIndex(series, len(ps))], series)
}

// CronSeries lists the series of every partition, by name.
func (d *Driver) CronSeries(ctx context.Context, queue string) ([]broker.CronSeries, error) {
	cl, err := inner[broker.CronLister](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return cl.CronSeries(ctx, queue)
	}
	var all []broker.CronSeries
	for _, p := range ps {
		s, err := cl.CronSeries(ctx, p)
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	slices.SortFunc(all, func(a, b broker.CronSeries) int { return cmp.Compare(a.Name, b.Name) })
	return all[:min(len(all), broker.MaxCronSeries)], nil
}

// Canceler

func (d *Driver) CancelJob(ctx context.Context, queue, id string) (broker.JobState, error) {
	c, err := inner[broker.Canceler](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return findFirst(ctx, d, queue, id, func(p string) (broker.JobState, error) { return c.CancelJob(ctx, p, id) }, func(s broker.JobState) bool { return s != 0 })
}

// WatchCancels watches every partition of queues; a notice names the
// logical queue and the delivery's receipt as the sharded consumer gave it.
func (d *Driver) WatchCancels(ctx context.Context, queues ...string) (<-chan broker.CanceledJob, error) {
	c, err := inner[broker.Canceler](d)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, q := range queues {
		all = append(all, d.Partitions(q)...)
	}
	ch, err := c.WatchCancels(ctx, all...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return merge(ctx, cancel, []<-chan broker.CanceledJob{ch}, func(n broker.CanceledJob) broker.CanceledJob {
		if q, k, ok := d.logical(n.Queue); ok {
			n.Queue = q
			n.Delivery = fmt.Sprintf("%d:%s", k, n.Delivery)
		}
		return n
	}), nil
}

// Pauser

func (d *Driver) PauseQueue(ctx context.Context, queue string) error {
	return eachPartition(d, queue, func(p broker.Pauser, q string) error { return p.PauseQueue(ctx, q) })
}

func (d *Driver) ResumeQueue(ctx context.Context, queue string) error {
	return eachPartition(d, queue, func(p broker.Pauser, q string) error { return p.ResumeQueue(ctx, q) })
}

// eachPartition runs f, with the inner driver as a T, on each partition of
// queue in turn, stopping at the first error.
func eachPartition[T any](d *Driver, queue string, f func(in T, partition string) error) error {
	in, err := inner[T](d)
	if err != nil {
		return err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return err
	}
	for _, q := range d.Partitions(queue) {
		if err := f(in, q); err != nil {
			return err
		}
	}
	return nil
}

// QueuePaused reports whether any partition of queue is paused.
func (d *Driver) QueuePaused(ctx context.Context, queue string) (bool, error) {
	p, err := inner[broker.Pauser](d)
	if err != nil {
		return false, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return false, err
	}
	for _, q := range d.Partitions(queue) {
		if paused, err := p.QueuePaused(ctx, q); err != nil || paused {
			return paused, err
		}
	}
	return false, nil
}

// Limiter

// SetLimit splits n among queue's partitions (each holds its share, the
// first n mod partitions one more), so a sharded queue's limit must be at
// least its partition count.
func (d *Driver) SetLimit(ctx context.Context, queue, kind string, n int) error {
	l, err := inner[broker.Limiter](d)
	if err != nil {
		return err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return err
	}
	if err := broker.ValidateLimit(queue, kind, n); err != nil {
		return err
	}
	ps := d.Partitions(queue)
	if n > 0 && n < len(ps) {
		return fmt.Errorf("conveyor: invalid limit: %d on queue %q of %d partitions: each partition holds a share, so the limit must be at least %d (or 0 to remove it)", n, queue, len(ps), len(ps))
	}
	for k, p := range ps {
		share := 0
		if n > 0 {
			share = n / len(ps)
			if k < n%len(ps) {
				share++
			}
		}
		if err := l.SetLimit(ctx, p, kind, share); err != nil {
			return err
		}
	}
	return nil
}

// Limits adds up the partitions' limits, kind by kind.
func (d *Driver) Limits(ctx context.Context, queue string) ([]broker.Limit, error) {
	l, err := inner[broker.Limiter](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return l.Limits(ctx, queue)
	}
	byKind := map[string]*broker.Limit{}
	var kinds []string
	for _, p := range ps {
		ls, err := l.Limits(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, x := range ls {
			sum := byKind[x.Kind]
			if sum == nil {
				sum = &broker.Limit{Kind: x.Kind}
				byKind[x.Kind] = sum
				kinds = append(kinds, x.Kind)
			}
			sum.Max += x.Max
			sum.Running += x.Running
			sum.Waiting += x.Waiting
		}
	}
	sort.Strings(kinds)
	out := make([]broker.Limit, len(kinds))
	for i, k := range kinds {
		out[i] = *byKind[k]
	}
	return out, nil
}

// Keeper and Upkeeper: a sharded queue's keeper is elected on its first
// partition and keeps them all.

func (d *Driver) Campaign(ctx context.Context, queue, id string, lead func(ctx context.Context)) error {
	k, err := inner[broker.Keeper](d)
	if err != nil {
		return err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return err
	}
	return k.Campaign(ctx, d.Partitions(queue)[0], id, lead)
}

func (d *Driver) Upkeep(ctx context.Context, queue string) (time.Duration, error) {
	u, err := inner[broker.Upkeeper](d)
	if err != nil {
		return 0, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, err
	}
	ps := d.Partitions(queue)
	next := time.Duration(-1)
	for _, p := range ps {
		n, err := u.Upkeep(ctx, p)
		if err != nil {
			return 0, err
		}
		if next < 0 || n < next {
			next = n
		}
	}
	return next, nil
}

// Historian: a sharded queue's history is sampled from its summed sizes
// and kept under the logical queue's name.

func (d *Driver) RecordSample(ctx context.Context, s broker.QueueSizes, every, keep time.Duration) (broker.Recorded, error) {
	h, err := inner[broker.Historian](d)
	if err != nil {
		return broker.Recorded{}, err
	}
	return h.RecordSample(ctx, s, every, keep)
}

func (d *Driver) History(ctx context.Context, queue string, since time.Time) ([]broker.Sample, error) {
	h, err := inner[broker.Historian](d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	return h.History(ctx, queue, since)
}

// WorkerRegistry: the workers are the inner driver's.

func (d *Driver) RegisterWorker(ctx context.Context, w *broker.WorkerInfo, ttl time.Duration) error {
	r, err := inner[broker.WorkerRegistry](d)
	if err != nil {
		return err
	}
	return r.RegisterWorker(ctx, w, ttl)
}

func (d *Driver) UnregisterWorker(ctx context.Context, id string) error {
	r, err := inner[broker.WorkerRegistry](d)
	if err != nil {
		return err
	}
	return r.UnregisterWorker(ctx, id)
}

func (d *Driver) Workers(ctx context.Context) ([]*broker.WorkerInfo, error) {
	r, err := inner[broker.WorkerRegistry](d)
	if err != nil {
		return nil, err
	}
	return r.Workers(ctx)
}
