package delay_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
	"github.com/conveyorq/conveyor/worker"
)

// BenchmarkTimerLateness: 10,000 timers due at random times 1 to 3 s ahead,
// run by a pool of 50 (with its promoter). Lateness is the handler's start
// minus the due time carried in the payload (unix nanoseconds). Run with
// -benchtime 1x; each iteration is one such run.
//
// Metrics: p50-ms, p99-ms, max-ms, min-ms (min must be >= 0: a timer never
// runs early) and early (how many ran before due). Targets: p50 <= 2 ms,
// p99 <= 10 ms.
//
// Where the time goes, per timer, in four parts that add up to its
// lateness (their p50s and p99s are reported as <part>-p50-ms and so on):
//   - roundup: due time to its score (rounded up to the millisecond);
//   - wake: score to the start of the promotion call that moved it (the
//     promoter's sleep overshooting, or the previous call still running);
//   - call: that call's round trip (the script and the network);
//   - handoff: the call's reply to the handler's start (the fetch woken by
//     the push, fetch.lua, the hand-over to a free worker).
//
// The pool's driver has a client of its own whose hook times the
// promotion calls (EVALSHA with the delayed set as KEYS[1] and three keys).
func BenchmarkTimerLateness(b *testing.B) {
	for _, td := range benchDrivers {
		b.Run(td.Name, func(b *testing.B) {
			ctx := context.Background()
			rdb := redistest.Client(b)
			prefix := redistest.Prefix(b)
			d := td.Must(b, rdb, prefix)
			const n = 10_000
			var late, roundup, wake, call, handoff []time.Duration
			for it := range b.N {
				queue := fmt.Sprintf("lat-%d", it)
				var (
					mu   sync.Mutex
					got  = make(map[string]time.Time, n)
					dups int
					all  = make(chan struct{})
				)
				h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					now := time.Now()
					mu.Lock()
					defer mu.Unlock()
					if _, ok := got[job.ID]; ok {
						dups++
						return nil
					}
					got[job.ID] = now
					if len(got) == n {
						close(all)
					}
					return nil
				})
				log := &promoteLog{delayed: timers.QueueKeys(prefix, queue).Delayed}
				prdb := redistest.NewClient(b)
				prdb.AddHook(log)
				p, err := worker.NewPool(td.Must(b, prdb, prefix), h, &worker.Config{Queue: queue, Concurrency: 50})
				if err != nil {
					b.Fatal(err)
				}
				stop := drivertest.Background(b, p.Run)
				now := time.Now()
				msgs := make([]*broker.Message, n)
				for i := range msgs {
					at := now.Add(time.Second + rand.N(2*time.Second))
					msgs[i] = &broker.Message{
						ID: fmt.Sprintf("lat-%05d", i), Kind: "timer", Queue: queue,
						Payload: strconv.AppendInt(nil, at.UnixNano(), 10), RunAt: at,
					}
				}
				for j := 0; j < n; j += 1000 {
					if err := d.Enqueue(ctx, msgs[j:j+1000]); err != nil {
						b.Fatal(err)
					}
				}
				if z, _, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || z != n {
					b.Fatalf("after enqueue: %d timers pending (err %v), want %d: the enqueue took more than a second?", z, err, n)
				}
				select {
				case <-all:
				case <-time.After(60 * time.Second):
					b.Fatal("timed out waiting for every timer to run")
				}
				stop()
				if dups > 0 {
					b.Fatalf("%d jobs ran more than once", dups)
				}

				// Timers in promotion order (score, then ID, as
				// ZRANGEBYSCORE returns them), matched to the calls in order.
				slices.SortFunc(msgs, func(x, y *broker.Message) int {
					if c := cmp.Compare(timers.Score(x.RunAt), timers.Score(y.RunAt)); c != 0 {
						return c
					}
					return strings.Compare(x.ID, y.ID)
				})
				calls := log.calls
				ci, moved := 0, 0
				for _, m := range msgs {
					for ci < len(calls) && moved == calls[ci].n {
						ci, moved = ci+1, 0
					}
					if ci == len(calls) {
						b.Fatalf("promotion calls moved fewer timers than ran")
					}
					moved++
					c := calls[ci]
					score := time.UnixMilli(timers.Score(m.RunAt))
					ran := got[m.ID]
					late = append(late, ran.Sub(m.RunAt))
					roundup = append(roundup, score.Sub(m.RunAt))
					wake = append(wake, c.start.Sub(score))
					call = append(call, c.done.Sub(c.start))
					handoff = append(handoff, ran.Sub(c.done))
				}
			}
			for _, s := range [][]time.Duration{late, roundup, wake, call, handoff} {
				slices.Sort(s)
			}
			early := 0
			for _, l := range late {
				if l < 0 {
					early++
				}
			}
			b.ReportMetric(ms(quantile(late, 0.50)), "p50-ms")
			b.ReportMetric(ms(quantile(late, 0.99)), "p99-ms")
			b.ReportMetric(ms(late[len(late)-1]), "max-ms")
			b.ReportMetric(ms(late[0]), "min-ms")
			b.ReportMetric(float64(early), "early")
			b.ReportMetric(ms(quantile(roundup, 0.50)), "roundup-p50-ms")
			b.ReportMetric(ms(quantile(wake, 0.50)), "wake-p50-ms")
			b.ReportMetric(ms(quantile(wake, 0.99)), "wake-p99-ms")
			b.ReportMetric(ms(quantile(call, 0.50)), "call-p50-ms")
			b.ReportMetric(ms(quantile(call, 0.99)), "call-p99-ms")
			b.ReportMetric(ms(quantile(handoff, 0.50)), "handoff-p50-ms")
			b.ReportMetric(ms(quantile(handoff, 0.99)), "handoff-p99-ms")
		})
	}
}

// promoteLog is a go-redis hook that times the promotion calls of one
// queue: EVALSHA (or EVAL) with three keys, the first the delayed set.
type promoteLog struct {
	delayed string
	mu      sync.Mutex
	calls   []promoteCall
}

// promoteCall is one promotion call that moved timers.
type promoteCall struct {
	start, done time.Time
	n           int
}

func (l *promoteLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *promoteLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *promoteLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || fmt.Sprint(args[2]) != "3" || args[3] != l.delayed {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		done := time.Now()
		if c, ok := cmd.(*redis.Cmd); ok && err == nil {
			if r, ok := c.Val().([]any); ok && len(r) == 2 {
				if n, _ := r[0].(int64); n > 0 {
					l.mu.Lock()
					l.calls = append(l.calls, promoteCall{start: start, done: done, n: int(n)})
					l.mu.Unlock()
				}
			}
		}
		return err
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile returns the q-quantile of sorted s (nearest rank).
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// BenchmarkPromote: how fast promoters move 100,000 timers that are all due,
// with one promoter and with four at once, against a baseline measured in
// the same run: the same 100,000 stored messages pushed into a ready
// structure of the same kind without scripts, in batches of 1,000, one
// round trip each (list: one LPUSH of 1,000; stream: a pipeline of 1,000
// XADDs), as many round trips as the promoters' 100 calls at least.
//
// Metrics: timers/s (target >= 50,000), baseline-msgs/s, promote/baseline,
// and the promotion calls that moved timers (calls/op) with their mean
// round trip (ms/call, timed by a hook on the promoters' client).
func BenchmarkPromote(b *testing.B) {
	for _, td := range benchDrivers {
		for _, np := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/promoters=%d", td.Name, np), func(b *testing.B) {
				ctx := context.Background()
				rdb := redistest.Client(b)
				prefix := redistest.Prefix(b)
				d := td.Must(b, rdb, prefix)
				const n = 100_000
				var (
					promoting, pushing, inCalls time.Duration
					calls                       int
				)
				for it := range b.N {
					b.StopTimer()
					queue := fmt.Sprintf("prom-%d", it)
					bodies := dueTimers(b, d, rdb, prefix, queue, n)
					log := &promoteLog{delayed: timers.QueueKeys(prefix, queue).Delayed}
					prdb := redistest.NewClient(b)
					prdb.AddHook(log)
					pd := td.Must(b, prdb, prefix)
					ps := make([]*delay.Promoter, np)
					for i := range ps {
						var err error
						if ps[i], err = delay.NewPromoter(pd, queue, nil); err != nil {
							b.Fatal(err)
						}
					}
					runCtx, cancel := context.WithCancel(ctx)
					var wg sync.WaitGroup
					b.StartTimer()
					began := time.Now()
					for _, p := range ps {
						wg.Go(func() { _ = p.Run(runCtx) })
					}
					waitPromoted(b, ps, n)
					took := time.Since(began)
					b.StopTimer()
					cancel()
					wg.Wait()
					promoting += took
					for _, c := range log.calls {
						calls++
						inCalls += c.done.Sub(c.start)
					}
					if ready, err := td.ReadyLen(ctx, rdb, prefix, queue); err != nil || ready != n {
						b.Fatalf("ready structure holds %d messages (err %v), want %d", ready, err, n)
					}
					if z, h, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || z != 0 || h != 0 {
						b.Fatalf("after promotion: %d delayed, %d bodies (err %v)", z, h, err)
					}

					base := fmt.Sprintf("%s:bench:baseline-%d", prefix, it)
					pushing += pushBaseline(b, td.Name, rdb, base, bodies)
					if err := rdb.Del(ctx, base, td.ReadyKey(prefix, queue)).Err(); err != nil {
						b.Fatal(err)
					}
				}
				rate := float64(n*b.N) / promoting.Seconds()
				baseRate := float64(n*b.N) / pushing.Seconds()
				b.ReportMetric(rate, "timers/s")
				b.ReportMetric(baseRate, "baseline-msgs/s")
				b.ReportMetric(rate/baseRate, "promote/baseline")
				b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
				b.ReportMetric(ms(inCalls/time.Duration(calls)), "ms/call")
			})
		}
	}
}

// dueTimers stores n timers in queue through the driver, due in an hour, then
// makes every one of them due at once by setting their scores to 0 (one
// ZUNIONSTORE of the delayed set onto itself with weight 0; the driver's
// stored messages are untouched). It returns the stored messages.
func dueTimers(b *testing.B, d broker.Driver, rdb redis.UniversalClient, prefix, queue string, n int) []string {
	b.Helper()
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	msgs := make([]*broker.Message, 0, 1000)
	for j := 0; j < n; j += 1000 {
		msgs = msgs[:0]
		for i := j; i < j+1000; i++ {
			msgs = append(msgs, &broker.Message{ID: fmt.Sprintf("due-%06d", i), Kind: "timer", Queue: queue, RunAt: at})
		}
		if err := d.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	k := timers.QueueKeys(prefix, queue)
	if err := rdb.ZUnionStore(ctx, k.Delayed, &redis.ZStore{Keys: []string{k.Delayed}, Weights: []float64{0}}).Err(); err != nil {
		b.Fatal(err)
	}
	bodies, err := rdb.HVals(ctx, k.Timers).Result()
	if err != nil {
		b.Fatal(err)
	}
	if len(bodies) != n {
		b.Fatalf("%d timers stored, want %d", len(bodies), n)
	}
	return bodies
}

// waitPromoted spins until the promoters together moved n timers.
func waitPromoted(b *testing.B, ps []*delay.Promoter, n int64) {
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		var sum int64
		for _, p := range ps {
			sum += p.Stats().Promoted
		}
		if sum == n {
			return
		}
		if sum > n {
			b.Fatalf("promoters report %d timers moved, only %d exist", sum, n)
		}
		if time.Now().After(deadline) {
			b.Fatalf("promoters moved %d of %d timers in 2 minutes", sum, n)
		}
		<-tick.C
	}
}

// pushBaseline pushes bodies to key without scripts, 1,000 per round trip,
// and returns how long it took.
func pushBaseline(b *testing.B, driver string, rdb redis.UniversalClient, key string, bodies []string) time.Duration {
	b.Helper()
	ctx := context.Background()
	batches := make([][]any, 0, len(bodies)/1000+1)
	for j := 0; j < len(bodies); j += 1000 {
		batch := make([]any, 0, 1000)
		for _, s := range bodies[j:min(j+1000, len(bodies))] {
			batch = append(batch, s)
		}
		batches = append(batches, batch)
	}
	began := time.Now()
	for _, batch := range batches {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if driver == "stream" {
				for _, v := range batch {
					p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"m", v}})
				}
				return nil
			}
			p.LPush(ctx, key, batch...)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(began)
	length := rdb.LLen
	if driver == "stream" {
		length = rdb.XLen
	}
	if got, err := length(ctx, key).Result(); err != nil || got != int64(len(bodies)) {
		b.Fatalf("baseline holds %d of %d messages (err %v)", got, len(bodies), err)
	}
	return took
}
