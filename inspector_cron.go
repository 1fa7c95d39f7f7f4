package conveyor

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
)

// CronSeries returns the cron series of queue (delay.Cron's entries, by
// Name) whose record of their latest stored fire Redis holds, each with
// that fire's time, sorted by name. A series is listed from its first
// stored fire until its record expires, a week or three gaps between its
// fires after its latest (docs/cron.md); the specs live in the apps, so
// a series that never stored a fire is not listed. Two round trips; at
// most broker.MaxCronSeries series, those whose records expire last. A
// driver without the index of series fails with an error wrapping
// broker.ErrUnsupported.
func (i *Inspector) CronSeries(ctx context.Context, queue string) ([]broker.CronSeries, error) {
	if err := checkQueue("cron series", queue); err != nil {
		return nil, err
	}
	l, ok := i.d.(broker.CronLister)
	if !ok || !i.d.Capabilities().Delay {
		return nil, fmt.Errorf("conveyor: inspector: cron series: driver %T lists no cron series: %w", i.d, broker.ErrUnsupported)
	}
	s, err := l.CronSeries(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: %w", err)
	}
	return s, nil
}
