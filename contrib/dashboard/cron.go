package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// cronRow is one cron series on a queue's cron page: its latest stored
// fire, which is its next fire while its timer is pending, its last
// otherwise (it ran, or is running).
type cronRow struct {
	Name string
	// At is the latest stored fire; Pending says it has not fired yet, and
	// FireID names its timer.
	At      time.Time
	Pending bool
	FireID  string
}

// cron is a queue's page of cron series: the series whose record of
// their latest fire Redis holds (Inspector.CronSeries), each with that
// fire, pending or past.
func (h *Handler) cron(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	insp, probe, err := h.openQueue(r, r.URL.Query().Get("q"), false)
	if err != nil {
		return err
	}
	data := struct {
		Queue       string
		Series      []cronRow
		Unsupported bool
		Max         int
	}{Queue: probe.Name, Max: broker.MaxCronSeries}
	series, err := insp.CronSeries(ctx, probe.Name)
	switch {
	case errors.Is(err, broker.ErrUnsupported):
		data.Unsupported = true
	case err != nil:
		return err
	}
	for _, s := range series {
		row := cronRow{Name: s.Name, At: s.LastFire, FireID: delay.FireID(s.Name, s.LastFire)}
		_, err := insp.Job(ctx, probe.Name, row.FireID, conveyor.JobDelayed)
		switch {
		case err == nil:
			row.Pending = true
		case !errors.Is(err, conveyor.ErrJobNotFound):
			return fmt.Errorf("cron series %q: %w", s.Name, err)
		}
		data.Series = append(data.Series, row)
	}
	return h.render(w, r, "cron", "Cron series of "+probe.Name, data)
}
