package broker

import (
	"context"
	"time"
)

// Keeper is implemented by drivers that elect one keeper per queue in a
// fleet, so that the cost of a queue's upkeep does not grow with the number
// of consumers: promoting its timers (see Timers) and, with an Upkeeper,
// handing back its expired leases. A worker pool campaigns for the upkeep of
// its queue (Campaign); while elected it promotes the queue's timers and
// calls Upkeep when asked to.
type Keeper interface {
	// Campaign runs the election of queue's keeper under candidate id
	// (unique in the fleet, such as a worker ID) until ctx ends, calling
	// lead each time this candidate is elected, with a context that ends
	// when it no longer is. One candidate leads at a time, but for a moment
	// after a leader stalls past its lease; when the leader dies another
	// is elected within about a second, and at once when it resigns (ctx
	// ended). The upkeep must be safe to run twice.
	Campaign(ctx context.Context, queue, id string, lead func(ctx context.Context)) error
}

// Upkeeper is implemented by drivers whose expired leases one keeper can
// hand back for the whole fleet. Consumers opened with ConsumerOptions.Kept
// then sleep while idle without looking for expired leases themselves.
type Upkeeper interface {
	// Upkeep runs queue's upkeep once: it hands back every expired lease (as
	// a consumer's fetch would), or wakes a sleeping consumer to take them
	// over, and sets the queue's wake-up when messages are ready. It returns
	// when it wants to run again: at the next lease deadline, or within
	// UpkeepEvery.
	Upkeep(ctx context.Context, queue string) (next time.Duration, err error)
}

// UpkeepEvery is the longest a keeper waits between two Upkeep calls, so
// that a lease taken after the last call is handed back within
// UpkeepEvery of its expiry.
const UpkeepEvery = time.Second
