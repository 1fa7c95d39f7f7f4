package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
)

// asynqFactory makes asynq targets: one queue per namespace (asynq has no
// key prefix; its keys are asynq:{<queue>}:<part>), an asynq.Client for
// the enqueue side and an asynq.Server for the pool, both on the client
// the workload passes. Errors asynq logs go to logs.
func asynqFactory(logs io.Writer) benchkit.Factory {
	return benchkit.Factory{Name: "asynq", New: func(rdb redis.UniversalClient, ns string) (benchkit.Target, error) {
		return &asynqTarget{rdb: rdb, queue: ns, c: asynq.NewClientFromRedisClient(rdb), logs: logs}, nil
	}}
}

type asynqTarget struct {
	rdb   redis.UniversalClient
	queue string
	c     *asynq.Client
	logs  io.Writer
}

func (t *asynqTarget) Enqueue(ctx context.Context, payload []byte) error {
	_, err := t.c.EnqueueContext(ctx, asynq.NewTask("bench", payload), asynq.Queue(t.queue))
	return err
}

// preloadWorkers is how many goroutines EnqueueMany uses: asynq has no
// batched enqueue, and EnqueueMany only preloads queues (untimed), so it
// goes as fast as asynq can take single calls.
const preloadWorkers = 16

func (t *asynqTarget) EnqueueMany(ctx context.Context, payloads [][]byte) error {
	return t.each(ctx, len(payloads), func(i int) error { return t.Enqueue(ctx, payloads[i]) })
}

func (t *asynqTarget) EnqueueAt(ctx context.Context, payloads [][]byte, at []time.Time) error {
	return t.each(ctx, len(payloads), func(i int) error {
		_, err := t.c.EnqueueContext(ctx, asynq.NewTask("bench", payloads[i]), asynq.Queue(t.queue), asynq.ProcessAt(at[i]))
		return err
	})
}

func (t *asynqTarget) each(ctx context.Context, n int, f func(i int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(preloadWorkers, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (t *asynqTarget) Serve(ctx context.Context, concurrency int, h func([]byte)) error {
	srv := asynq.NewServerFromRedisClient(t.rdb, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{t.queue: 1},
		Logger:      errorLogger{t.logs},
		LogLevel:    asynq.ErrorLevel,
	})
	err := srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		h(task.Payload())
		return nil
	}))
	if err != nil {
		return fmt.Errorf("asynq: start: %w", err)
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

func (t *asynqTarget) Close(ctx context.Context) error {
	err := benchkit.DeleteKeys(ctx, t.rdb, "asynq:{"+t.queue+"}:*")
	return errors.Join(err, t.rdb.SRem(ctx, "asynq:queues", t.queue).Err())
}

// errorLogger passes asynq's errors on and drops the rest.
type errorLogger struct{ w io.Writer }

func (errorLogger) Debug(...any) {}
func (errorLogger) Info(...any)  {}
func (errorLogger) Warn(...any)  {}
func (l errorLogger) Error(args ...any) {
	fmt.Fprintln(l.w, append([]any{"\rasynq:"}, args...)...)
}
func (l errorLogger) Fatal(args ...any) {
	fmt.Fprintln(l.w, append([]any{"\rasynq: fatal:"}, args...)...)
}
