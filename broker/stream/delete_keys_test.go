package stream

import (
	"context"
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestDeleteScriptTakesTheCronIndex: the delete script's one DEL, which
// frees the queue's jobs, takes the queue's index of cron series too (the
// SCAN after it is for the keys whose names hold data), and lua/delete.lua's
// header names every key the driver passes it.
func TestDeleteScriptTakesTheCronIndex(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	d, err := New(rdb, &Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	x := d.deleter()
	ks, args := x.Call("q")
	redistest.DeleteTakesCronIndex(t, rdb, d, "q", d.keys("q").timers.CronSeries, ks, func(ctx context.Context) error {
		_, err := x.Script.Run(ctx, rdb, ks, append([]any{"1"}, args...)...)
		return err
	})
}
