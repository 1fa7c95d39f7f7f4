package main

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// latches are one-shot events by name: the handlers fire them, the main
// goroutine waits for them.
type latches struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func newLatches() *latches { return &latches{m: map[string]chan struct{}{}} }

func (l *latches) get(name string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.m[name]
	if !ok {
		ch = make(chan struct{})
		l.m[name] = ch
	}
	return ch
}

// fire marks the event name as happened; firing it again does nothing.
func (l *latches) fire(name string) {
	ch := l.get(name)
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// wait returns once the event name happened, or with ctx's cause.
func (l *latches) wait(ctx context.Context, name string) error {
	select {
	case <-l.get(name):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %q: %w", name, context.Cause(ctx))
	}
}

// syncWriter serialises writes from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
