package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/worker"
)

// BenchmarkPoolEndToEnd: 100,000 pre-enqueued no-op jobs with 100-byte
// payloads through a pool of concurrency 50; reports jobs/s processed.
// Run with -benchtime=1x (or more) and no -race.
func BenchmarkPoolEndToEnd(b *testing.B) {
	const n = 100_000
	payload := make([]byte, 100)
	for i, drv := range durable {
		b.Run(drv.Name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				e := newEnvB(b, i)
				ctx := context.Background()
				for k := 0; k < n; k += 1000 {
					reqs := make([]conveyor.Request, 1000)
					for j := range reqs {
						reqs[j] = conveyor.Request{Kind: "noop", Args: payload}
					}
					if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
						b.Fatal(err)
					}
				}
				var handled atomic.Int64
				done := make(chan struct{})
				h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					if handled.Add(1) == n {
						close(done)
					}
					return nil
				})
				cd := &countingDriver{Driver: e.d}
				defer func() {
					b.Logf("fetches %d avg %.1f; acks %d avg %.1f", cd.fetches.Load(), float64(cd.fetched.Load())/float64(cd.fetches.Load()), cd.acks.Load(), float64(cd.acked.Load())/float64(cd.acks.Load()))
				}()
				p, err := worker.NewPool(cd, h, &worker.Config{Queue: "q", Concurrency: 50})
				if err != nil {
					b.Fatal(err)
				}
				runCtx, cancel := context.WithCancel(ctx)
				errc := make(chan error, 1)
				b.StartTimer()
				t0 := time.Now()
				go func() { errc <- p.Run(runCtx) }()
				select {
				case <-done:
				case <-time.After(5 * time.Minute):
					b.Fatal("timed out")
				}
				total += time.Since(t0)
				b.StopTimer()
				cancel()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "jobs/s")
		})
	}
}
