package list_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func benchDriver(b *testing.B) *list.Driver {
	b.Helper()
	d, err := list.New(redistest.Client(b), &list.Config{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func benchMsgs(from, n int) []*broker.Message {
	msgs := make([]*broker.Message, n)
	payload := []byte(`{"user":12345,"action":"noop"}`)
	for i := range msgs {
		msgs[i] = &broker.Message{ID: "m" + strconv.Itoa(from+i), Kind: "noop", Queue: "bench", Payload: payload}
	}
	return msgs
}

func reportJobs(b *testing.B, jobs int) {
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}

// preload enqueues n messages in batches of 1000, untimed.
func preload(b *testing.B, d *list.Driver, n int) {
	b.Helper()
	for i := 0; i < n; i += 1000 {
		if err := d.Enqueue(context.Background(), benchMsgs(i, min(1000, n-i))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueue(b *testing.B) {
	d := benchDriver(b)
	ctx := context.Background()
	msgs := benchMsgs(0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := d.Enqueue(ctx, msgs[i:i+1]); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, b.N)
}

func BenchmarkEnqueueBatch100(b *testing.B) {
	d := benchDriver(b)
	ctx := context.Background()
	msgs := benchMsgs(0, 100*b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := d.Enqueue(ctx, msgs[100*i:100*i+100]); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, 100*b.N)
}

// BenchmarkFetchAck: one op fetches a batch of 50 and acks it in one call.
func BenchmarkFetchAck(b *testing.B) {
	const batch = 50
	d := benchDriver(b)
	ctx := context.Background()
	preload(b, d, batch*b.N)
	c, err := d.Open(ctx, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ds, err := c.Fetch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Ack(ctx, ds...); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, batch*b.N)
}

// BenchmarkFetchAckConcurrent drains a preloaded queue with four fetchers
// (batches of 50, one Ack call each) at once: the driver's share of a worker
// pool's ceiling.
func BenchmarkFetchAckConcurrent(b *testing.B) {
	const batch, fetchers = 50, 4
	d := benchDriver(b)
	total := batch * b.N
	preload(b, d, total)
	c, err := d.Open(context.Background(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	// The fetchers stop when the last job is acked: their blocked Fetch
	// returns at once.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		done atomic.Int64
		wg   sync.WaitGroup
	)
	b.ReportAllocs()
	b.ResetTimer()
	for range fetchers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := c.Fetch(ctx, batch)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				if err := c.Ack(ctx, ds...); err != nil {
					b.Error(err)
					return
				}
				if done.Add(int64(len(ds))) == int64(total) {
					stop()
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := done.Load(); n != int64(total) {
		b.Fatalf("%d of %d jobs done", n, total)
	}
	reportJobs(b, total)
}
