package benchkit

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync/atomic"
	"time"
)

// serving is a Target's pool running in the background.
type serving struct {
	cancel context.CancelFunc
	errc   chan error
	err    error
	done   bool
}

func serve(ctx context.Context, t Target, concurrency int, h func([]byte)) *serving {
	return serveWith(ctx, func(ctx context.Context) error { return t.Serve(ctx, concurrency, h) })
}

// serveWith runs run, a pool's Serve, in the background until stopped.
func serveWith(ctx context.Context, run func(context.Context) error) *serving {
	ctx, cancel := context.WithCancel(ctx)
	s := &serving{cancel: cancel, errc: make(chan error, 1)}
	go func() { s.errc <- run(ctx) }()
	return s
}

// stop stops the pool and waits for it.
func (s *serving) stop() error {
	s.cancel()
	if !s.done {
		s.err, s.done = <-s.errc, true
	}
	return s.err
}

// wait waits for ch, failing when the pool stops first, ctx ends or
// timeout passes.
func (s *serving) wait(ctx context.Context, ch <-chan struct{}, timeout time.Duration, what string) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case err := <-s.errc:
		s.err, s.done = err, true
		if err == nil {
			err = errors.New("returned nil")
		}
		return fmt.Errorf("benchkit: pool stopped while waiting for %s: %w", what, err)
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("benchkit: timed out after %s waiting for %s", timeout, what)
	}
}

// warmUp enqueues one job stamped 0 and waits until the pool has run it,
// so that measurements start with the pool fetching.
func warmUp(ctx context.Context, e *Env, t Target, s *serving, handled *tally) error {
	if err := t.Enqueue(ctx, make([]byte, e.Cfg.Payload)); err != nil {
		return fmt.Errorf("benchkit: warm-up enqueue: %w", err)
	}
	return s.wait(ctx, handled.reached(1), 30*time.Second, "the warm-up job")
}

// preload enqueues n jobs in batches of 1000, untimed. Its CPU samples
// carry the profiler label phase=preload, so that a profile of a run can
// leave them out (go tool pprof -tagignore phase=preload).
func preload(ctx context.Context, e *Env, t Target, n int, label string) (err error) {
	pprof.Do(ctx, pprof.Labels("phase", "preload"), func(ctx context.Context) {
		err = preloadBatches(ctx, e, t, n, label)
	})
	return err
}

func preloadBatches(ctx context.Context, e *Env, t Target, n int, label string) error {
	var done atomic.Int64
	stop := e.progress(label+" (preload)", n, &done)
	defer stop()
	if err := enqueueInBatches(ctx, t, e.payload(1), n, 1000, &done); err != nil {
		return fmt.Errorf("benchkit: preload: %w", err)
	}
	return nil
}

// enqueueInBatches enqueues n copies of payload p with EnqueueMany, size
// at a time, counting them in done.
func enqueueInBatches(ctx context.Context, t Target, p []byte, n, size int, done *atomic.Int64) error {
	batch := make([][]byte, 0, size)
	for i := 0; i < n; i += size {
		batch = batch[:0]
		for range min(size, n-i) {
			batch = append(batch, p)
		}
		if err := t.EnqueueMany(ctx, batch); err != nil {
			return err
		}
		done.Add(int64(len(batch)))
	}
	return nil
}

// sleep waits for d, failing only when the pool stops first or ctx ends.
func (s *serving) sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case err := <-s.errc:
		s.err, s.done = err, true
		if err == nil {
			err = errors.New("returned nil")
		}
		return fmt.Errorf("benchkit: pool stopped while idle: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}
