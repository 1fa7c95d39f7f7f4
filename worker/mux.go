package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/conveyorq/conveyor"
)

// ErrUnknownKind is returned (wrapped) by a Mux for a job whose kind has no
// handler. The job is not lost: it follows the failure policy (retried with
// backoff, so that a rolling deploy that adds the handler picks it up, then
// discarded with the reason after MaxAttempts).
var ErrUnknownKind = errors.New("conveyor: no handler for kind")

// ErrDecode is wrapped by the error a typed handler returns when the payload
// does not decode into its type. Such errors are marked SkipRetry: the job
// goes to the discard queue with the reason, as retrying cannot help.
var ErrDecode = errors.New("conveyor: cannot decode payload")

// Mux routes jobs to handlers by kind, as http.ServeMux routes requests by
// path. Registering a kind twice panics: it is a programming error.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]conveyor.Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: make(map[string]conveyor.Handler)} }

// Handle registers h for kind.
func (m *Mux) Handle(kind string, h conveyor.Handler) {
	if kind == "" || h == nil {
		panic("conveyor: Mux.Handle: empty kind or nil handler")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.handlers[kind]; ok {
		panic(fmt.Sprintf("conveyor: Mux.Handle: kind %q registered twice", kind))
	}
	m.handlers[kind] = h
}

// HandleFunc registers f for kind.
func (m *Mux) HandleFunc(kind string, f func(ctx context.Context, job *conveyor.Job) error) {
	m.Handle(kind, conveyor.HandlerFunc(f))
}

// Kinds lists the registered kinds.
func (m *Mux) Kinds() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.handlers))
	for k := range m.handlers {
		out = append(out, k)
	}
	return out
}

// ProcessJob runs the handler registered for job.Kind.
func (m *Mux) ProcessJob(ctx context.Context, job *conveyor.Job) error {
	m.mu.RLock()
	h, ok := m.handlers[job.Kind]
	m.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownKind, job.Kind)
	}
	return h.ProcessJob(ctx, job)
}

// HandleJSON registers a typed handler: the payload is decoded from JSON into a
// T once, before f runs; an empty payload gives the zero T. A payload that
// does not decode is not retried (see ErrDecode).
func HandleJSON[T any](m *Mux, kind string, f func(ctx context.Context, job *conveyor.Job, args T) error) {
	m.HandleFunc(kind, func(ctx context.Context, job *conveyor.Job) error {
		var args T
		if len(job.Payload) == 0 {
			return f(ctx, job, args) // no payload: the zero T
		}
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return conveyor.SkipRetry(fmt.Errorf("%w of %s into %T: %v", ErrDecode, kind, args, err))
		}
		return f(ctx, job, args)
	})
}
