package worker_test

import (
	"context"
	"sync/atomic"

	"github.com/conveyorq/conveyor/broker"
)

type countingDriver struct {
	broker.Driver
	fetches, fetched, acks, acked atomic.Int64
}

func (d *countingDriver) Open(ctx context.Context, q string, o *broker.ConsumerOptions) (broker.Consumer, error) {
	c, err := d.Driver.Open(ctx, q, o)
	return &countingConsumer{Consumer: c, d: d}, err
}

type countingConsumer struct {
	broker.Consumer
	d *countingDriver
}

func (c *countingConsumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	ds, err := c.Consumer.Fetch(ctx, max)
	c.d.fetches.Add(1)
	c.d.fetched.Add(int64(len(ds)))
	return ds, err
}

func (c *countingConsumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	c.d.acks.Add(1)
	c.d.acked.Add(int64(len(ds)))
	return c.Consumer.Ack(ctx, ds...)
}
