package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

var _ shard.Recorder = (*stream.Driver)(nil)

// TestRecordPartitionsLivesAsLongAsTheQueue: the least-privilege user of
// docs/redis-keys.md (with +scan, to delete) records a count, which a
// later call with another count gets back; DeleteQueue deletes the key
// with the queue, after which another count may be recorded.
func TestRecordPartitionsLivesAsLongAsTheQueue(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, rdb := redistest.ACLUser(t, append(redistest.LeastPrivilege(prefix), "+scan")...)
	d, err := stream.New(rdb, &stream.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d.RecordPartitions(ctx, "q", 4); err != nil || got != 4 {
		t.Fatalf("first RecordPartitions(4) = %d, %v; want 4", got, err)
	}
	if got, err := d.RecordPartitions(ctx, "q", 8); err != nil || got != 4 {
		t.Fatalf("second RecordPartitions(8) = %d, %v; want the recorded 4", got, err)
	}
	if err := d.Enqueue(ctx, []*broker.Message{{ID: "a", Kind: "test", Queue: "q", Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}

	if res, err := d.DeleteQueue(ctx, "q", false); err != nil || res.Ready != 1 {
		t.Fatalf("DeleteQueue = %+v, %v; want 1 ready job deleted", res, err)
	}
	key := keys.Queue(prefix, "q").Part("partitions")
	if n, err := redistest.Client(t).Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS %s after DeleteQueue = %d, %v; want 0", key, n, err)
	}
	if got, err := d.RecordPartitions(ctx, "q", 8); err != nil || got != 8 {
		t.Fatalf("RecordPartitions(8) after DeleteQueue = %d, %v; want 8", got, err)
	}
}
