package conveyor_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
)

// TestInspectorCronSeries: CronSeries lists the series of a queue that
// stored a fire, sorted by name, with their last fires; it refuses a bad
// queue name, and a driver without broker.CronLister says so.
func TestInspectorCronSeries(t *testing.T) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			e := newInspectEnv(t, dt)
			at := time.UnixMilli(time.Now().Add(20 * time.Second).UnixMilli())
			for i, series := range []string{"weekly", "daily", "hourly"} {
				fire := at.Add(time.Duration(i) * time.Second)
				m := &broker.Message{ID: series + "@" + strconv.FormatInt(fire.UnixMilli(), 10), Kind: "k", Queue: "reports", RunAt: fire}
				if ok, err := e.d.(broker.Timers).EnqueueFire(e.ctx, series, m, time.Hour); err != nil || !ok {
					t.Fatalf("EnqueueFire(%s) = %v, %v", series, ok, err)
				}
			}
			got, err := e.insp.CronSeries(e.ctx, "reports")
			if err != nil {
				t.Fatal(err)
			}
			want := []broker.CronSeries{{Name: "daily", LastFire: at.Add(time.Second)}, {Name: "hourly", LastFire: at.Add(2 * time.Second)}, {Name: "weekly", LastFire: at}}
			if len(got) != len(want) {
				t.Fatalf("CronSeries = %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i].Name != want[i].Name || !got[i].LastFire.Equal(want[i].LastFire) {
					t.Fatalf("CronSeries = %+v, want %+v", got, want)
				}
			}
			if s, err := e.insp.CronSeries(e.ctx, "work"); err != nil || len(s) != 0 {
				t.Errorf("CronSeries of a queue without series = %+v, %v; want none", s, err)
			}
			if _, err := e.insp.CronSeries(e.ctx, "a{b}"); !errors.Is(err, conveyor.ErrInvalidQueue) {
				t.Errorf("CronSeries(a{b}): %v, want ErrInvalidQueue", err)
			}
			insp, err := conveyor.NewInspector(readOnly{e.d, e.d.(broker.Inspector)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := insp.CronSeries(e.ctx, "reports"); !errors.Is(err, conveyor.ErrUnsupported) {
				t.Errorf("CronSeries on a driver without broker.CronLister: %v, want ErrUnsupported", err)
			}
		})
	}
}
