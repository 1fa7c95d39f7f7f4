package partitions_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/partitions"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRecordKeepsTheFirstCount: the first call records its count in the
// queue's partitions key, without a TTL; a later call with another count
// gets the first one back and leaves the key as it was.
func TestRecordKeepsTheFirstCount(t *testing.T) {
	t.Parallel()
	ctx, rdb, prefix := ctxT(t), redistest.Client(t), redistest.Prefix(t)
	key := keys.Queue(prefix, "orders").Part("partitions")
	if k := partitions.Key(prefix, "orders"); k != key {
		t.Fatalf("Key = %q, want %q", k, key)
	}

	if got, err := partitions.Record(ctx, rdb, prefix, "orders", 4); err != nil || got != 4 {
		t.Fatalf("first Record(4) = %d, %v; want 4", got, err)
	}
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "4" {
		t.Fatalf("%s holds %q, %v; want \"4\"", key, v, err)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL %s = %v, %v; want none (-1)", key, ttl, err)
	}
	if got, err := partitions.Record(ctx, rdb, prefix, "orders", 8); err != nil || got != 4 {
		t.Fatalf("second Record(8) = %d, %v; want the recorded 4", got, err)
	}
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "4" {
		t.Fatalf("after the second Record %s holds %q, %v; want \"4\"", key, v, err)
	}
	// Another queue has a count of its own.
	if got, err := partitions.Record(ctx, rdb, prefix, "mail", 1024); err != nil || got != 1024 {
		t.Fatalf("Record(mail, 1024) = %d, %v; want 1024", got, err)
	}
}

// TestRecordRace: processes recording different counts at once all learn
// the same one, the one that was set.
func TestRecordRace(t *testing.T) {
	t.Parallel()
	ctx, rdb, prefix := ctxT(t), redistest.Client(t), redistest.Prefix(t)
	const callers = 16
	got := make([]int, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = partitions.Record(ctx, rdb, prefix, "q", i+1)
		}()
	}
	wg.Wait()
	v, err := rdb.Get(ctx, partitions.Key(prefix, "q")).Int()
	if err != nil {
		t.Fatal(err)
	}
	for i := range callers {
		if errs[i] != nil || got[i] != v {
			t.Errorf("caller %d: Record(%d) = %d, %v; want the recorded %d", i, i+1, got[i], errs[i], v)
		}
	}
}

// TestRecordCorruptValue: a recorded value that is not a positive integer
// in decimal, or a key of another type, is an error naming the key, and
// the key is left as it was.
func TestRecordCorruptValue(t *testing.T) {
	t.Parallel()
	ctx, rdb, prefix := ctxT(t), redistest.Client(t), redistest.Prefix(t)
	for i, v := range []string{"", "x", "0", "-3", "+4", "04", " 4", "4 ", "2.5", "99999999999999999999999"} {
		queue := "q" + string(rune('a'+i))
		key := partitions.Key(prefix, queue)
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := partitions.Record(ctx, rdb, prefix, queue, 4)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Record over %q = %d, %v; want an error naming %s", v, got, err, key)
		}
		if s, err := rdb.Get(ctx, key).Result(); err != nil || s != v {
			t.Errorf("after Record %s holds %q, %v; want %q", key, s, err, v)
		}
	}

	key := partitions.Key(prefix, "list")
	if err := rdb.RPush(ctx, key, "4").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := partitions.Record(ctx, rdb, prefix, "list", 4); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("Record over a LIST = %d, %v; want an error naming %s", got, err, key)
	}
}

// TestRecordRefusesBadArguments: an invalid queue name or a count out of
// 1..Max is refused before anything is written.
func TestRecordRefusesBadArguments(t *testing.T) {
	t.Parallel()
	ctx, rdb, prefix := ctxT(t), redistest.Client(t), redistest.Prefix(t)
	for _, q := range []string{"", "a{b}", "a b", strings.Repeat("q", 129)} {
		_, err := partitions.Record(ctx, rdb, prefix, q, 2)
		var qe *broker.QueueNameError
		if !errors.As(err, &qe) {
			t.Errorf("Record(%q) = %v, want a *broker.QueueNameError", q, err)
		}
	}
	for _, n := range []int{-1, 0, partitions.Max + 1} {
		if got, err := partitions.Record(ctx, rdb, prefix, "q", n); err == nil {
			t.Errorf("Record(q, %d) = %d, nil; want an error", n, got)
		}
	}
	if ks := redistest.AllKeys(t, rdb, prefix); len(ks) != 0 {
		t.Fatalf("refused calls wrote %q", ks)
	}
}

// TestMaxIsTheShardMax: the drivers refuse the counts broker/shard refuses.
func TestMaxIsTheShardMax(t *testing.T) {
	t.Parallel()
	if partitions.Max != shard.MaxPartitions {
		t.Fatalf("partitions.Max = %d, shard.MaxPartitions = %d", partitions.Max, shard.MaxPartitions)
	}
}
