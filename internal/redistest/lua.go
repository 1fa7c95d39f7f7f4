package redistest

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// headerKey matches a KEYS line of a Lua script's header: "-- KEYS[3]" or
// a range, "-- KEYS[20..23]".
var headerKey = regexp.MustCompile(`(?m)^--\s+KEYS\[(\d+)(?:\.\.(\d+))?\]`)

// HeaderKeys returns how many KEYS the header of the Lua script in file
// names: the highest index of its "-- KEYS[i]" (or "-- KEYS[i..j]") lines.
func HeaderKeys(t testing.TB, file string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range headerKey.FindAllStringSubmatch(string(src), -1) {
		for _, s := range m[1:] {
			if i, err := strconv.Atoi(s); err == nil {
				n = max(n, i)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s names no KEYS in its header", file)
	}
	return n
}

// DeleteTakesCronIndex checks a durable driver's queue delete: d (the
// driver) stores a fire of a cron series in queue, so that the queue's
// index of series, key index, exists; then run, the driver's delete.lua
// run on its KEYS ks (forced), must delete it, and lua/delete.lua's header
// must name as many KEYS as ks holds.
func DeleteTakesCronIndex(t testing.TB, rdb redis.UniversalClient, d broker.Timers, queue, index string, ks []string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.UnixMilli(time.Now().Add(20 * time.Second).UnixMilli())
	m := &broker.Message{ID: "nightly@" + strconv.FormatInt(at.UnixMilli(), 10), Kind: "k", Queue: queue, RunAt: at}
	if ok, err := d.EnqueueFire(ctx, "nightly", m, time.Hour); err != nil || !ok {
		t.Fatalf("EnqueueFire = %v, %v; want stored", ok, err)
	}
	if n, err := rdb.Exists(ctx, index).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s after a fire = %d, %v; want the index of series", index, n, err)
	}
	if n := HeaderKeys(t, "lua/delete.lua"); n != len(ks) {
		t.Errorf("lua/delete.lua names %d KEYS in its header, the driver passes %d", n, len(ks))
	}
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, index).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS %s after the delete script = %d, %v; want it deleted with the jobs", index, n, err)
	}
}
