package conveyortest

import (
	"context"
	"slices"

	"github.com/conveyorq/conveyor/broker"
)

// cancelBuffer is how many notices a WatchCancels channel holds for a
// reader that is behind; past it, notices are dropped, as a Redis
// subscription may lose them: Extend reports every cancelled delivery.
const cancelBuffer = 1024

// CancelJob cancels the job id of queue and reports the state it was in,
// as the Redis drivers do: a pending timer named id (JobDelayed) and a
// ready job (JobReady; also one waiting in its group's line or for a slot
// of a concurrency limit) are removed, and a grouped job among them lets
// the next of its group in. A job in flight (JobInFlight) is marked: the
// watchers of its queue (WatchCancels) are told, every Extend of its
// delivery reports broker.ErrJobCanceled (and still extends the lease),
// and a hand-back of it (Release, Retry, Postpone) or the expiry of its
// lease removes the job instead of handing it back; its holder ends it
// with Ack. It reports 0 when no job id is delayed, ready or in flight.
// Its cost grows with the jobs the queue holds. It implements
// broker.Canceler.
func (d *Driver) CancelJob(ctx context.Context, queue, id string) (broker.JobState, error) {
	if err := checkTimerID(queue, id); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queues[queue]
	if q == nil {
		return 0, nil
	}
	if e := q.timers[id]; e != nil {
		delete(q.timers, id)
		if q.release(e) {
			q.notify()
		}
		return broker.JobDelayed, nil
	}
	if q.unline(id) {
		return broker.JobReady, nil
	}
	if e := q.unwait(id); e != nil {
		if q.release(e) {
			q.notify()
		}
		return broker.JobReady, nil
	}
	if i := slices.IndexFunc(q.ready, func(e *entry) bool { return e.msg.ID == id }); i >= 0 {
		e := q.ready[i]
		q.ready = slices.Delete(q.ready, i, i+1)
		if q.release(e) || q.pumpLimits() {
			q.notify()
		}
		return broker.JobReady, nil
	}
	var held *entry
	for _, e := range q.inflight {
		// The oldest delivery under id, should two be in flight.
		if e.msg.ID == id && (held == nil || e.seq < held.seq) {
			held = e
		}
	}
	if held == nil {
		return 0, nil
	}
	held.canceled = true
	d.publishCancel(broker.CanceledJob{Queue: queue, ID: id, Delivery: held.receipt})
	return broker.JobInFlight, nil
}

// publishCancel tells the watchers of n.Queue that n's delivery was
// cancelled; d.mu is held.
func (d *Driver) publishCancel(n broker.CanceledJob) {
	for ch, queues := range d.cancelWatches {
		if !queues[n.Queue] {
			continue
		}
		select {
		case ch <- n:
		default: // the reader is behind: Extend tells the holder
		}
	}
}

// WatchCancels returns a channel that receives each job of queues
// cancelled while in flight, as CancelJob marks it, until ctx ends (it is
// then closed). It holds up to 1024 notices a reader has not taken yet;
// past that, notices are dropped, and Extend still reports the cancel. It
// implements broker.Canceler.
func (d *Driver) WatchCancels(ctx context.Context, queues ...string) (<-chan broker.CanceledJob, error) {
	set := make(map[string]bool, len(queues))
	for _, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, err
		}
		set[q] = true
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan broker.CanceledJob, cancelBuffer)
	d.mu.Lock()
	d.cancelWatches[ch] = set
	d.mu.Unlock()
	go func() {
		<-ctx.Done()
		// Sends happen under d.mu, so none can follow the close.
		d.mu.Lock()
		delete(d.cancelWatches, ch)
		close(ch)
		d.mu.Unlock()
	}()
	return ch, nil
}
