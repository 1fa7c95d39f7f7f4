package conveyor_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

var payload100 = make([]byte, 100)

func benchDrivers(b *testing.B, rdb redis.UniversalClient, prefix string) map[string]broker.Driver {
	l, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	s, err := stream.New(rdb, &stream.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]broker.Driver{"list": l, "stream": s}
}

// BenchmarkEnqueueLoop compares Enqueue called in a loop from one goroutine
// with a bare go-redis LPUSH loop of the same payload, measured alternately
// in the same run; it reports both rates and their ratio.
func BenchmarkEnqueueLoop(b *testing.B) {
	rdb := redistest.NewClient(b)
	prefix := redistest.Prefix(b)
	ctx := context.Background()
	for _, name := range []string{"list", "stream"} {
		b.Run(name, func(b *testing.B) {
			d := benchDrivers(b, rdb, prefix)[name]
			c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "loop-" + name})
			if err != nil {
				b.Fatal(err)
			}
			bare := prefix + ":bare-" + name
			const round = 2000
			var tBare, tConv time.Duration
			jobs := 0
			for jobs < b.N {
				t0 := time.Now()
				for range round {
					if err := rdb.LPush(ctx, bare, payload100).Err(); err != nil {
						b.Fatal(err)
					}
				}
				tBare += time.Since(t0)
				t0 = time.Now()
				for range round {
					if _, err := c.Enqueue(ctx, "k", payload100, nil); err != nil {
						b.Fatal(err)
					}
				}
				tConv += time.Since(t0)
				jobs += round
				rdb.Del(ctx, bare)
			}
			bareRate := float64(jobs) / tBare.Seconds()
			convRate := float64(jobs) / tConv.Seconds()
			b.ReportMetric(bareRate, "lpush/s")
			b.ReportMetric(convRate, "jobs/s")
			b.ReportMetric(convRate/bareRate, "ratio")
		})
	}
}

// BenchmarkEnqueueParallel: 50 goroutines calling Enqueue at once.
func BenchmarkEnqueueParallel(b *testing.B) {
	rdb := redistest.NewClient(b)
	prefix := redistest.Prefix(b)
	for _, name := range []string{"list", "stream"} {
		b.Run(name, func(b *testing.B) {
			d := benchDrivers(b, rdb, prefix)[name]
			c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "par-" + name})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(max(1, 50/runtimeProcs()))
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Enqueue(context.Background(), "k", payload100, nil); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			})
			b.ReportMetric(float64(n.Load())/time.Since(t0).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkEnqueueMany100: EnqueueMany in batches of 100.
func BenchmarkEnqueueMany100(b *testing.B) {
	rdb := redistest.NewClient(b)
	prefix := redistest.Prefix(b)
	reqs := make([]conveyor.Request, 100)
	for i := range reqs {
		reqs[i] = conveyor.Request{Kind: "k", Args: payload100}
	}
	for _, name := range []string{"list", "stream"} {
		b.Run(name, func(b *testing.B) {
			d := benchDrivers(b, rdb, prefix)[name]
			c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "many-" + name})
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for range b.N {
				if _, err := c.EnqueueMany(context.Background(), reqs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(100*b.N)/time.Since(t0).Seconds(), "jobs/s")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
