package conveyor

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// History returns queue's samples taken at or after since, oldest first:
// its sizes and cumulative counters as the queue's keeper read them once
// per interval (worker.Config.HistoryEvery, a minute by default), kept for
// worker.Config.HistoryKeep (a day by default). The jobs processed between
// two samples are the difference of their Processed. A queue no pool
// serves records no samples. One Redis command; at most broker.MaxHistory
// samples, the newest.
func (i *Inspector) History(ctx context.Context, queue string, since time.Time) ([]broker.Sample, error) {
	if err := checkQueue("history", queue); err != nil {
		return nil, err
	}
	h, ok := i.d.(broker.Historian)
	if !ok || !i.d.Capabilities().History {
		return nil, fmt.Errorf("conveyor: inspector: history: driver %T keeps no history: %w", i.d, broker.ErrUnsupported)
	}
	s, err := h.History(ctx, queue, since)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: %w", err)
	}
	return s, nil
}
