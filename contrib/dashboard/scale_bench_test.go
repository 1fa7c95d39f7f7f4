package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// BenchmarkPagesAtScale times the overview and a queue's pages over 100
// queues holding 1,000,000 ready jobs between them (half list, half
// stream; 10,000 each) and a day of history each (1,440 samples), with
// 1,000 delayed and 1,000 discarded jobs in the queue whose pages are
// read. Seeding takes a while: run it alone, on a Redis of its own, e.g.
//
//	CONVEYOR_TEST_REDIS_URL=redis://127.0.0.1:6390 go test -run XXX -bench PagesAtScale -benchtime 50x ./contrib/dashboard
func BenchmarkPagesAtScale(b *testing.B) {
	const queues, perQueue, samples = 100, 10_000, 1440
	ctx := context.Background()
	rdb := redistest.Client(b)
	prefix := redistest.Prefix(b)
	now := time.Now().Truncate(time.Minute)
	start := time.Now()
	for q := range queues {
		dt := drivertest.Durable[q%2]
		name := fmt.Sprintf("q%03d", q)
		c, err := conveyor.NewClient(dt.Must(b, rdb, prefix), &conveyor.ClientConfig{DefaultQueue: name})
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < perQueue; k += 1000 {
			reqs := make([]conveyor.Request, 1000)
			for j := range reqs {
				reqs[j] = conveyor.Request{Kind: "order.persist", Args: []byte(`{"order":` + strconv.Itoa(k+j) + `}`)}
			}
			if _, err := c.EnqueueMany(ctx, reqs...); err != nil {
				b.Fatal(err)
			}
		}
		if q == 0 {
			for k := range 1000 {
				if _, err := c.Enqueue(ctx, "order.timeout", []byte(`{}`), &conveyor.EnqueueOptions{Delay: time.Hour, ID: "t" + strconv.Itoa(k)}); err != nil {
					b.Fatal(err)
				}
			}
		}
		_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			key := history.Key(prefix, name)
			for k := range samples {
				at := now.Add(time.Duration(k-samples) * time.Minute)
				p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", at.UnixMilli()), Values: []any{
					"r", perQueue, "f", 40, "d", 0, "x", 0, "g", 0, "l", 0, "p", int64(k) * 600, "e", k,
				}})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("seeded %d queues, %d ready jobs, %d samples each, in %v", queues, queues*perQueue, samples, time.Since(start).Round(time.Millisecond))
	dash, err := New(&Config{Redis: rdb, Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	figs, err := dash.set.Overview(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ready := int64(0)
	for _, f := range figs {
		ready += f.Ready
	}
	if len(figs) != queues || ready != queues*perQueue {
		b.Fatalf("seeded %d queues holding %d ready jobs, want %d and %d", len(figs), ready, queues, queues*perQueue)
	}
	srv := httptest.NewServer(dash)
	b.Cleanup(srv.Close)
	for _, page := range []struct{ name, path string }{
		{"overview", "/"},
		{"queue-list", "/queue?q=q000"},
		{"queue-stream", "/queue?q=q001"},
		{"queue-list-24h", "/queue?q=q000&range=24h"},
		{"queue-list-delayed", "/queue?q=q000&state=delayed"},
		{"queue-stream-page-100", "/queue?q=q001&offset=5000"},
		{"job-search-delayed", "/job?q=q000&id=t500"},
	} {
		b.Run(page.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + page.path)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: status %d", page.path, resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
		})
	}
}
