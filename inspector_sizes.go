package conveyor

import (
	"context"
	"fmt"
)

// QueueSizes returns the figures of the queues named, in the order given,
// each queue read atomically, all in one round trip: one pipeline of one
// script call per queue. It serves a caller that wants some queues, not
// every one AllQueues reads: a page of a long list, or the queues of one
// driver under a prefix that queues of both durable drivers share. A queue
// never used has all zeros. With no queues it returns nil and sends
// nothing.
func (i *Inspector) QueueSizes(ctx context.Context, queues ...string) ([]*QueueSizes, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	for _, q := range queues {
		if err := checkQueue("queue sizes", q); err != nil {
			return nil, err
		}
	}
	s, err := i.x.QueueSizes(ctx, queues...)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: queue sizes: %w", err)
	}
	if len(s) != len(queues) {
		return nil, fmt.Errorf("conveyor: inspector: queue sizes: driver returned %d sizes for %d queues", len(s), len(queues))
	}
	out := make([]*QueueSizes, len(s))
	for k := range s {
		out[k] = &s[k]
	}
	return out, nil
}
