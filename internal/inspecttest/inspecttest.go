// Package inspecttest puts jobs in every state for the tests of the
// Inspector's front ends (the CLI and the dashboard), against a real Redis.
package inspecttest

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// Seeder stores and leases jobs through Client and Driver (on one prefix).
type Seeder struct {
	T      testing.TB
	Ctx    context.Context
	Client *conveyor.Client
	Driver broker.Driver
}

// Enqueue stores a job of kind with id in queue, payload {"id": id}.
func (s *Seeder) Enqueue(queue, kind, id string, opts *conveyor.EnqueueOptions) {
	s.T.Helper()
	var o conveyor.EnqueueOptions
	if opts != nil {
		o = *opts
	}
	o.Queue, o.ID = queue, id
	if _, err := s.Client.Enqueue(s.Ctx, kind, map[string]string{"id": id}, &o); err != nil {
		s.T.Fatalf("enqueue %s: %v", id, err)
	}
}

// Fetch leases n jobs of queue to a consumer that never settles them (its
// leases last 10 minutes) and returns them.
func (s *Seeder) Fetch(queue string, n int) (broker.Consumer, []*broker.Delivery) {
	s.T.Helper()
	c, err := s.Driver.Open(s.Ctx, queue, &broker.ConsumerOptions{VisibilityTimeout: 10 * time.Minute})
	if err != nil {
		s.T.Fatal(err)
	}
	s.T.Cleanup(func() { _ = c.Close(context.Background()) })
	var ds []*broker.Delivery
	for len(ds) < n {
		got, err := c.Fetch(s.Ctx, n-len(ds))
		if err != nil {
			s.T.Fatalf("fetch: %v", err)
		}
		ds = append(ds, got...)
	}
	return c, ds
}

// Seed puts jobs of queue "work" in every state, in this order: discarded
// d1 (kind mail, reason "boom d1") and d2 (sms, "boom d2"), in flight f1
// and f2, ready r1 (mail, header correlation-id: corr-42), r2 (sms), r3
// (mail), delayed t1 and t2 (due in 1h and 2h).
func (s *Seeder) Seed() {
	s.T.Helper()
	s.Enqueue("work", "mail", "d1", nil)
	s.Enqueue("work", "sms", "d2", nil)
	c, ds := s.Fetch("work", 2)
	for _, d := range ds {
		if err := c.Discard(s.Ctx, d, "boom "+d.ID); err != nil {
			s.T.Fatal(err)
		}
	}
	s.Enqueue("work", "mail", "f1", nil)
	s.Enqueue("work", "mail", "f2", nil)
	s.Fetch("work", 2)
	s.Enqueue("work", "mail", "r1", &conveyor.EnqueueOptions{Headers: map[string]string{"correlation-id": "corr-42"}})
	s.Enqueue("work", "sms", "r2", nil)
	s.Enqueue("work", "mail", "r3", nil)
	s.Enqueue("work", "mail", "t1", &conveyor.EnqueueOptions{Delay: time.Hour})
	s.Enqueue("work", "mail", "t2", &conveyor.EnqueueOptions{Delay: 2 * time.Hour})
}

// SeedFinished puts records of finished jobs in queue "done": k1 (mail)
// acked with the result {"invoice":"INV-1"}, kept 2h, and k2 (sms)
// discarded with the error "<script>alert(1)</script>", kept 1h; so k1
// comes first (the latest to expire).
func (s *Seeder) SeedFinished() {
	s.T.Helper()
	s.Enqueue("done", "mail", "k1", nil)
	s.Enqueue("done", "sms", "k2", nil)
	c, ds := s.Fetch("done", 2)
	for _, d := range ds {
		keep, outcome, result, why := 2*time.Hour, "acked", `{"invoice":"INV-1"}`, ""
		if d.ID == "k2" {
			keep, outcome, result, why = time.Hour, "discarded", "", "<script>alert(1)</script>"
		}
		d.Finish = &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{
			Queue: d.Queue, Kind: d.Kind, Outcome: outcome, Attempt: d.Attempt(), EnqueuedAt: d.EnqueuedAt,
			StartedAt: time.Now(), Worker: "seeder-1", Error: why, Result: []byte(result),
		}}
		var err error
		if why != "" {
			err = c.Discard(s.Ctx, d, why)
		} else {
			err = c.Ack(s.Ctx, d)
		}
		if err != nil {
			s.T.Fatal(err)
		}
	}
}
