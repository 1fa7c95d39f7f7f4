package stream_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestInspectRegistry: a queue joins the registry on the driver's first
// enqueue to it, in the same round trip as the enqueue's first command, and
// on its first Open; after that nothing more is sent for it.
func TestInspectRegistry(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	log := &drivertest.CmdLog{}
	rdb.AddHook(log)
	e := newEnvWith(t, rdb, nil)
	ctx := context.Background()

	e.enqueue(msg("a", "1"))
	// No stream yet: the plain XADD (with the SADD) adds nothing, the script
	// creates the stream and its group (EVAL after EVALSHA if the server
	// lacks the script).
	got := log.Take()
	if len(got) < 2 || !slices.Equal(got[0], []string{"xadd", "zadd", "sadd"}) || slices.Contains(slices.Concat(got[1:]...), "sadd") {
		t.Fatalf("first enqueue to a sent %q, want xadd and zadd with sadd, then the script without", got)
	}
	e.enqueue(msg("a", "2"))
	log.Expect(t, "second enqueue to a", []string{"xadd", "zadd"})
	e.enqueue(msg("b", "1"), msg("c", "1"), msg("a", "3"))
	log.ExpectScripted(t, "first batch to b and c", []string{"evalsha", "evalsha", "evalsha", "sadd"})
	e.open("d", time.Minute)
	log.Expect(t, "first Open of d", []string{"sadd"})
	e.open("a", time.Minute)
	log.Expect(t, "Open of a known queue")
	if qs, err := e.d.Queues(ctx); err != nil || !slices.Equal(qs, []string{"a", "b", "c", "d"}) {
		t.Fatalf("Queues = %q, %v; want [a b c d]", qs, err)
	}
}

// TestInspectWithoutGroup: a stream whose group is missing (destroyed by
// hand) is all ready, as the next fetch recreates the group from ID 0.
func TestInspectWithoutGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, id := range []string{"x", "y", "z"} {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.key("q", "stream"), Values: []any{"m", codec.Encode(msg("q", id), 0)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.d.QueueSizes(ctx, "q")
	if err != nil || s[0].Ready != 3 || s[0].InFlight != 0 {
		t.Fatalf("QueueSizes = %+v, %v; want 3 ready", s, err)
	}
	js, total, err := e.d.ListJobs(ctx, "q", broker.JobReady, 1, 10)
	if got := jobIDs(js); err != nil || total != 3 || !slices.Equal(got, []string{"y", "z"}) {
		t.Fatalf("ListJobs(ready, 1, 10) = %q of %d, %v; want [y z] of 3", got, total, err)
	}
	if j, err := e.d.FindJob(ctx, "q", broker.JobReady, "z"); err != nil || j == nil || j.ID != "z" {
		t.Fatalf("FindJob(ready, z) = %+v, %v", j, err)
	}
	if j, err := e.d.FindJob(ctx, "q", broker.JobInFlight, "z"); err != nil || j != nil {
		t.Fatalf("FindJob(in flight, z) = %+v, %v; want nil", j, err)
	}
	if js, total, err := e.d.ListJobs(ctx, "q", broker.JobInFlight, 0, 10); err != nil || total != 0 || len(js) != 0 {
		t.Fatalf("ListJobs(in flight) = %d of %d, %v; want none", len(js), total, err)
	}
}

// TestInspectDeletedWhilePending: an entry deleted by hand while pending
// counts as in flight (it is in the group's pending list until a fetch
// drops it) and is listed with an empty Raw; ready never goes negative.
func TestInspectDeletedWhilePending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"), msg("q", "c"))
	ds := e.fetch(e.open("q", time.Hour), 3)
	if err := e.rdb.XDel(ctx, e.key("q", "stream"), ds[1].Receipt).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := e.d.QueueSizes(ctx, "q")
	if err != nil || s[0].Ready != 0 || s[0].InFlight != 3 {
		t.Fatalf("QueueSizes = %+v, %v; want 0 ready, 3 in flight", s, err)
	}
	js, total, err := e.d.ListJobs(ctx, "q", broker.JobInFlight, 0, 10)
	if got := jobIDs(js); err != nil || total != 3 || !slices.Equal(got, []string{"a", "", "c"}) {
		t.Fatalf("ListJobs(in flight) = %q of %d, %v; want [a  c] of 3", got, total, err)
	}
	if js[1].Raw == nil || len(js[1].Raw) != 0 || js[0].Consumer == "" || js[0].LeasedAt.IsZero() {
		t.Fatalf("in-flight jobs %+v / %+v: want the gone entry with an empty Raw, the others with consumer and delivery time", js[1], js[0])
	}
}

// TestInspectDeepPage: a page far into a state takes several script calls
// (each skips at most 10,000 entries) and lands where it should.
func TestInspectDeepPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	msgs := make([]*broker.Message, 12005)
	for i := range msgs {
		msgs[i] = msg("q", fmt.Sprintf("m%05d", i))
	}
	e.enqueue(msgs...)
	js, total, err := e.d.ListJobs(ctx, "q", broker.JobReady, 12000, 10)
	want := []string{msgs[12000].ID, msgs[12001].ID, msgs[12002].ID, msgs[12003].ID, msgs[12004].ID}
	if got := jobIDs(js); err != nil || total != 12005 || !slices.Equal(got, want) {
		t.Fatalf("ListJobs(ready, 12000, 10) = %q of %d, %v; want %q of 12005", got, total, err, want)
	}
	e.fetch(e.open("q", time.Hour), 1000)
	js, total, err = e.d.ListJobs(ctx, "q", broker.JobInFlight, 998, 10)
	if got := jobIDs(js); err != nil || total != 1000 || !slices.Equal(got, []string{msgs[998].ID, msgs[999].ID}) {
		t.Fatalf("ListJobs(in flight, 998, 10) = %q of %d, %v", got, total, err)
	}
}

func jobIDs(js []*broker.JobInfo) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}
