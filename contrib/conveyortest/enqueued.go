package conveyortest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// EnqueuedJob is a job waiting in a queue of the Driver: ready, or delayed
// as a timer. The embedded Message carries its ID, Kind, Queue, raw
// Payload, Headers, MaxAttempts, Timeout and EnqueuedAt.
type EnqueuedJob[T any] struct {
	broker.Message
	// Args is the payload decoded as JSON into T (copied as it is when T is
	// []byte or json.RawMessage).
	Args T
	// Delayed is true for a job that waits as a timer until its RunAt:
	// enqueued with a Delay or RunAt ahead, or retried or postponed for
	// later. The embedded Message's RunAt is then its due time, to the
	// millisecond; it is zero for a ready job.
	Delayed bool
}

// Enqueued returns the jobs waiting in queue, ready ones first in the
// order they will run, then those waiting in their group's line
// (EnqueueOptions.Group) in enqueue order, then those waiting for a slot
// of a concurrency limit (Driver.SetLimit), then delayed ones earliest
// first, each with its payload decoded into T. Jobs fetched and not yet
// settled, and discarded ones, are not listed (a conveyor.Inspector on the
// driver lists every state). It fails t when a payload does not decode
// into T: with jobs of several kinds in one queue, use json.RawMessage for
// T, or RequireEnqueued, which decodes only the jobs of one kind.
func Enqueued[T any](t testing.TB, d *Driver, queue string) []*EnqueuedJob[T] {
	t.Helper()
	return enqueued[T](t, d, queue, "")
}

// RequireEnqueued returns the one job of kind waiting in queue, its
// payload decoded into T, and fails t unless there is exactly one.
func RequireEnqueued[T any](t testing.TB, d *Driver, queue, kind string) *EnqueuedJob[T] {
	t.Helper()
	jobs := enqueued[T](t, d, queue, kind)
	if len(jobs) != 1 {
		t.Fatalf("conveyortest: %d jobs of kind %q waiting in queue %q, want 1 (queue holds: %s)", len(jobs), kind, queue, d.summary(queue))
	}
	return jobs[0]
}

// enqueued returns the jobs waiting in queue, only those of kind when it
// is set.
func enqueued[T any](t testing.TB, d *Driver, queue, kind string) []*EnqueuedJob[T] {
	t.Helper()
	var out []*EnqueuedJob[T]
	for _, w := range d.waiting(queue) {
		m := &w.Message
		if kind != "" && m.Kind != kind {
			continue
		}
		j := &EnqueuedJob[T]{Message: *m, Delayed: w.State == broker.JobDelayed}
		if err := decode(m.Payload, &j.Args); err != nil {
			t.Fatalf("conveyortest: job %s (kind %q) of queue %q: payload %q does not decode into %T: %v", m.ID, m.Kind, queue, m.Payload, j.Args, err)
		}
		out = append(out, j)
	}
	return out
}

// decode decodes a payload into v: JSON, except into *[]byte and
// *json.RawMessage, which take a copy.
func decode(payload []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = append([]byte(nil), payload...)
		return nil
	case *json.RawMessage:
		*p = append(json.RawMessage(nil), payload...)
		return nil
	}
	return json.Unmarshal(payload, v)
}

// waiting returns queue's ready jobs, in order, then those in its groups'
// and its limits' lines, then its timers, earliest first, their RunAt the
// due time.
func (d *Driver) waiting(queue string) []*broker.JobInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queues[queue]
	if q == nil {
		return nil
	}
	var out []*broker.JobInfo
	for _, state := range []broker.JobState{broker.JobReady, broker.JobDelayed} {
		for _, e := range q.entries(state) {
			j := e.info(queue, state)
			if state == broker.JobReady {
				j.RunAt = time.Time{}
			}
			out = append(out, j)
		}
	}
	return out
}

// summary names the kinds and IDs waiting in queue, for a failure message.
func (d *Driver) summary(queue string) string {
	ms := d.waiting(queue)
	if len(ms) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ms))
	for i, j := range ms {
		parts[i] = j.Kind + " " + j.ID
	}
	return strings.Join(parts, ", ")
}
