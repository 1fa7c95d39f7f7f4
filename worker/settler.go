package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// settler carries out a job's settle calls for the pool: acks share round
// trips with other jobs' acks, and extensions are serialised with the
// heartbeat's.
type settler struct {
	p *Pool
	t *task
}

func (s settler) Ack(ctx context.Context, d *broker.Delivery) error {
	outcome, why := "acked", ""
	s.t.mu.Lock()
	if s.t.ackCanceled {
		outcome, why = "canceled", conveyor.ErrJobCanceled.Error()
	}
	s.t.mu.Unlock()
	d.Finish = s.p.finishRecord(s.t, outcome, why)
	return s.p.acks.Do(ctx, d)
}

func (s settler) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.p.cons.Retry(ctx, d, at)
}

func (s settler) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.p.cons.Postpone(ctx, d, at)
}

func (s settler) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	d.Finish = s.p.finishRecord(s.t, "discarded", reason)
	err := s.p.cons.Discard(ctx, d, reason)
	if err == nil && s.p.cfg.OnDiscard != nil {
		s.p.onDiscard(ctx, s.t.job, reason)
	}
	return err
}

// onDiscard runs the OnDiscard hook for a stored discard.
func (p *Pool) onDiscard(ctx context.Context, job *conveyor.Job, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			p.log.Warn("OnDiscard hook panicked", "queue", job.Queue, "kind", job.Kind, "job_id", job.ID,
				"attempt", job.Attempt(), "panic", fmt.Sprint(r))
		}
	}()
	p.cfg.OnDiscard(ctx, job, reason)
}

func (s settler) Extend(ctx context.Context, d *broker.Delivery, ttl time.Duration) error {
	s.t.extending.Lock()
	defer s.t.extending.Unlock()
	err := s.p.cons.Extend(ctx, ttl, d)
	if errors.Is(err, broker.ErrJobCanceled) {
		s.p.cancelTask(s.t) // the pool ends the job as cancelled, whatever the handler returns
	}
	return err
}

// recordKeep returns how long the record of a job of the pool is kept: the
// job's own EnqueueOptions.Record, else its queue's QueueRecords, else
// Records; 0 for none.
func (p *Pool) recordKeep(m *broker.Message) time.Duration {
	if d, ok := conveyor.RecordOf(m); ok {
		return d
	}
	if d, ok := p.cfg.QueueRecords[m.Queue]; ok {
		return d
	}
	return p.cfg.Records
}

// finishRecord returns the record request of t's job ending with outcome
// and err (the error that ended it, "" for none), nil when the job gets no
// record.
func (p *Pool) finishRecord(t *task, outcome, err string) *broker.FinishRecord {
	keep := p.recordKeep(&t.d.Message)
	if keep <= 0 || !p.d.Capabilities().Records {
		return nil
	}
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	d := t.d
	return &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{
		Queue: d.Queue, Kind: d.Kind, Outcome: outcome, Attempt: d.Attempt(), Recoveries: d.Recoveries,
		EnqueuedAt: d.EnqueuedAt, StartedAt: started, Worker: p.id, Error: err, Result: t.job.Result(),
	}}
}
