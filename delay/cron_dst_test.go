package delay_test

import (
	"testing"
	"time"

	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCronDST runs specs in America/New_York across the 2026 changes (8
// March, 02:00 EST becomes 03:00 EDT; 1 November, 02:00 EDT becomes 01:00
// EST) end to end, with the fires docs/cron.md promises:
//
//   - a daily 02:30 does not fire on 8 March (02:30 does not exist that
//     day); it is not moved to 03:00;
//   - a daily 01:30 fires twice on 1 November, at 01:30 EDT and an hour
//     later at 01:30 EST: two fires with two fire IDs;
//   - an hourly spec fires every hour of absolute time: no hour is skipped
//     in spring, and the repeated 01:00 fires twice in autumn;
//   - a CRON_TZ= prefix gives the same fires as CronConfig.Location.
//
// The test steps the clock to a second before each expected fire and
// waits for it; at the end the fires delivered must be exactly these.
func TestCronDST(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, spec string
		loc        *time.Location
		from       time.Time
		want       []string // RFC 3339, as HeaderCronFire shows them
	}{
		{"spring-0230", "30 2 * * *", ny, time.Date(2026, 3, 7, 0, 0, 0, 0, ny),
			[]string{"2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"}},
		{"spring-0230-crontz", "CRON_TZ=America/New_York 30 2 * * *", time.UTC, time.Date(2026, 3, 7, 0, 0, 0, 0, ny),
			[]string{"2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"}},
		{"fall-0130", "30 1 * * *", ny, time.Date(2026, 10, 31, 0, 0, 0, 0, ny),
			[]string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"spring-hourly", "0 * * * *", ny, time.Date(2026, 3, 8, 0, 30, 0, 0, ny),
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"fall-hourly", "0 * * * *", ny, time.Date(2026, 11, 1, 0, 30, 0, 0, ny),
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
	}
	td := timerDrivers[0]
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			const queue = "cron"
			clock := newCronClock(tc.from)
			log := collectFires(t, td, prefix, queue)
			in := startCron(t, td, prefix, &delay.CronConfig{Clock: clock, Location: tc.loc, Queue: queue},
				delay.CronEntry{Name: "dst", Spec: tc.spec, Kind: "k"})
			var want []time.Time
			for _, s := range tc.want {
				at, err := time.Parse(time.RFC3339, s)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, at)
				clock.Set(at.Add(-time.Second))
				id := delay.FireID("dst", at)
				log.waitFor(t, id)
				if m, _ := log.message(id); m.Headers[delay.HeaderCronFire] != s {
					t.Errorf("fire %s: %s header %q, want %q", id, delay.HeaderCronFire, m.Headers[delay.HeaderCronFire], s)
				}
			}
			in.stop()
			log.drain(t)
			checkFires(t, log.fires(t, "dst"), want)
		})
	}
}
