package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// Benchmarks run against the test Redis (CONVEYOR_TEST_REDIS_URL); each
// reports jobs/s. Payloads are 64 bytes.

func benchDriver(b *testing.B) (*stream.Driver, string) {
	b.Helper()
	d, err := stream.New(redistest.Client(b), &stream.Config{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	return d, "bench"
}

func benchMsg(queue string, i int) *broker.Message {
	return &broker.Message{
		ID: fmt.Sprintf("job-%09d", i), Kind: "noop", Queue: queue,
		Payload: make([]byte, 64), EnqueuedAt: time.Now(),
	}
}

func reportJobs(b *testing.B, jobs int) {
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueue: one message per call (one round trip each).
func BenchmarkEnqueue(b *testing.B) {
	d, q := benchDriver(b)
	ctx := context.Background()
	msgs := []*broker.Message{benchMsg(q, 0)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		msgs[0].ID = fmt.Sprintf("job-%09d", i)
		if err := d.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, b.N)
}

// BenchmarkEnqueueBatch100: 100 messages of one queue per call.
func BenchmarkEnqueueBatch100(b *testing.B) {
	d, q := benchDriver(b)
	ctx := context.Background()
	msgs := make([]*broker.Message, 100)
	for i := range msgs {
		msgs[i] = benchMsg(q, i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, 100*b.N)
}

// BenchmarkFetchAck: one consumer fetches batches of 50 and acks each batch
// in one call; b.N jobs are enqueued beforehand, outside the timer.
func BenchmarkFetchAck(b *testing.B) {
	d, q := benchDriver(b)
	ctx := context.Background()
	n := b.N
	for i := 0; i < n; i += 500 {
		batch := make([]*broker.Message, 0, 500)
		for j := i; j < min(n, i+500); j++ {
			batch = append(batch, benchMsg(q, j))
		}
		if err := d.Enqueue(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	c, err := d.Open(ctx, q, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < n; {
		ds, err := c.Fetch(ctx, 50)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Ack(ctx, ds...); err != nil {
			b.Fatal(err)
		}
		done += len(ds)
	}
	b.StopTimer()
	reportJobs(b, n)
}

// BenchmarkFetchAckParallel: like BenchmarkFetchAck with 4 consumers at
// once, so round trips overlap as they do under a worker pool.
func BenchmarkFetchAckParallel(b *testing.B) {
	d, q := benchDriver(b)
	ctx := context.Background()
	n := b.N
	for i := 0; i < n; i += 500 {
		batch := make([]*broker.Message, 0, 500)
		for j := i; j < min(n, i+500); j++ {
			batch = append(batch, benchMsg(q, j))
		}
		if err := d.Enqueue(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	const consumers = 4
	cs := make([]broker.Consumer, consumers)
	for i := range cs {
		c, err := d.Open(ctx, q, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		cs[i] = c
	}
	var left atomic.Int64
	left.Store(int64(n))
	errs := make(chan error, consumers)
	b.ReportAllocs()
	b.ResetTimer()
	for _, c := range cs {
		go func() {
			for left.Load() > 0 {
				fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				ds, err := c.Fetch(fctx, 50)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue // the others took the rest
				}
				if err == nil {
					err = c.Ack(ctx, ds...)
				}
				if err != nil {
					errs <- err
					return
				}
				left.Add(-int64(len(ds)))
			}
			errs <- nil
		}()
	}
	for range consumers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportJobs(b, n)
}
