package broker

import (
	"context"
	"time"
)

// Pauser pauses and resumes queues fleet-wide; the list and stream drivers
// implement it (Capabilities.Pause). A paused queue keeps accepting
// enqueues, its timers are still promoted and its running jobs finish; only
// fetching stops. The state is a key in Redis, so it survives restarts of
// every process.
type Pauser interface {
	// PauseQueue pauses queue: from at most PauseLag after it returns,
	// no consumer's Fetch returns the queue's messages.
	PauseQueue(ctx context.Context, queue string) error
	// ResumeQueue lets consumers fetch from queue again, within PauseLag.
	ResumeQueue(ctx context.Context, queue string) error
	// QueuePaused reports whether queue is paused.
	QueuePaused(ctx context.Context, queue string) (bool, error)
}

// PauseWatcher is implemented by the consumers of a driver with
// Capabilities.Pause. Paused reports whether the consumer's queue is paused,
// asking Redis at most once per PauseLag: the answer is shared with the
// consumer's own fetches, so a worker pool that asks about the jobs it
// fetched ahead adds no round trip of its own within that time.
type PauseWatcher interface {
	Paused(ctx context.Context) (bool, error)
}

// PauseLag bounds how long after PauseQueue or ResumeQueue returns a
// consumer may still act on the earlier state: a consumer learns it within
// this time, whether it is fetching or waiting.
const PauseLag = 500 * time.Millisecond
