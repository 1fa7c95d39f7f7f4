package broker

import (
	"context"
	"fmt"
	"time"
)

// Historian is the side of a driver whose Capabilities has History: each
// queue's recent history of sizes and counters, kept in Redis for a
// bounded time. The queue's keeper (one pool of the fleet, broker.Keeper)
// records one sample per interval; readers such as a dashboard draw their
// charts from the samples and poll nothing themselves.
type Historian interface {
	// RecordSample stores s as queue s.Queue's sample of the interval of
	// length every (from MinHistoryEvery) that holds the server's current
	// time, unless a sample of that interval or a later one is stored
	// already: another keeper took it, and stored reports false. Samples
	// older than keep are dropped, and the whole history keep after its
	// last sample.
	RecordSample(ctx context.Context, s QueueSizes, every, keep time.Duration) (Recorded, error)
	// History returns queue's samples taken at or after since, oldest
	// first: the newest MaxHistory of them when there are more.
	History(ctx context.Context, queue string, since time.Time) ([]Sample, error)
}

// Recorded is what Historian.RecordSample did.
type Recorded struct {
	// At is the start of the interval the sample was taken in, by the
	// server's clock.
	At time.Time
	// Stored is false when the interval had a sample already.
	Stored bool
	// Next is how long until the next interval starts, by the server's
	// clock, so that a local clock that disagrees does not matter.
	Next time.Duration
}

// Sample is a queue's sizes and counters as one keeper read them at the
// start of an interval (Historian).
type Sample struct {
	// At is the start of the interval the sample stands for.
	At time.Time `json:"at"`
	// The sizes, as QueueSizes counts them.
	Ready     int64 `json:"ready"`
	InFlight  int64 `json:"in_flight"`
	Delayed   int64 `json:"delayed"`
	Discarded int64 `json:"discarded"`
	Grouped   int64 `json:"grouped"`
	Limited   int64 `json:"limited"`
	// The cumulative counters, as QueueSizes counts them: the jobs
	// processed (or failed) between two samples are the difference.
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
}

const (
	// MinHistoryEvery is the shortest interval between two samples.
	MinHistoryEvery = time.Second
	// MaxHistory caps the samples one History call returns: a day of
	// samples a minute apart is 1,440.
	MaxHistory = 10_000
)

// ValidateHistory checks RecordSample's intervals: every from
// MinHistoryEvery, keep at least every, both whole milliseconds.
func ValidateHistory(every, keep time.Duration) error {
	switch {
	case every < MinHistoryEvery:
		return fmt.Errorf("conveyor: history interval %v is below the minimum of %v", every, MinHistoryEvery)
	case keep < every:
		return fmt.Errorf("conveyor: history retention %v is shorter than its interval %v", keep, every)
	case every%time.Millisecond != 0 || keep%time.Millisecond != 0:
		return fmt.Errorf("conveyor: history interval %v and retention %v must be whole milliseconds", every, keep)
	}
	return nil
}
