package stream_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

// The shared suite (broker/brokertest, Group*) holds the stream driver to
// FIFO groups; these tests cover the ends of a grouped job it does not
// reach on this driver: a poison discard and the takeover of a cancelled
// delivery in fetch.lua, the cap, a delete, and PrepareAdd.

// groupedMsg returns message id of queue in group g.
func groupedMsg(queue, id, g string) *broker.Message {
	m := msg(queue, id)
	m.Group = g
	return m
}

// groupKeys returns the names of the group keys of queue that exist.
func (e *env) groupKeys(queue string) []string {
	e.t.Helper()
	var out []string
	for _, k := range e.keys() {
		if strings.HasPrefix(k, e.prefix+":{"+queue+"}:group") {
			out = append(out, k)
		}
	}
	return out
}

// A grouped job discarded as poison (its lease expired MaxRecoveries
// times) ends: the next job of its group is appended, and the same fetch
// delivers it.
func TestGroupPoisonLetsNextIn(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnvWith(t, rdb, &stream.Config{PollInterval: 10 * time.Millisecond})
		e.enqueue(groupedMsg("q", "a1", "g"), groupedMsg("q", "a2", "g"))
		for i := range 3 {
			e.fetchExpecting(e.open("q", poisonLease), "a1", i)
		}
		c := e.open("q", poisonLease)
		ds := e.fetch(c, 10)
		if got := ids(ds); !slices.Equal(got, []string{"a2"}) {
			t.Fatalf("after a1 turned poison, fetched %v, want [a2]", got)
		}
		if n := e.d.Stats().Poisoned; n != 1 {
			t.Fatalf("Stats().Poisoned = %d, want 1", n)
		}
		if err := c.Ack(context.Background(), ds...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		if ks := e.groupKeys("q"); len(ks) != 0 {
			t.Fatalf("group keys left after every job ended: %v", ks)
		}
	})
}

// A grouped job cancelled in flight whose holder died is removed by the
// takeover of its lease, which lets the next job of its group in.
func TestGroupCanceledTakeoverLetsNextIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 10 * time.Millisecond})
	ctx := context.Background()
	e.enqueue(groupedMsg("q", "a1", "g"), groupedMsg("q", "a2", "g"))
	e.fetchExpecting(e.open("q", poisonLease), "a1", 0) // its holder dies
	st, err := e.d.CancelJob(ctx, "q", "a1")
	if err != nil || st != broker.JobInFlight {
		t.Fatalf("CancelJob(a1) = %v, %v; want in flight", st, err)
	}
	c := e.open("q", poisonLease)
	ds := e.fetch(c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after a1's lease ran out, fetched %v, want [a2]", got)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if ks := e.groupKeys("q"); len(ks) != 0 {
		t.Fatalf("group keys left after every job ended: %v", ks)
	}
}

// The jobs waiting in their groups' lines count toward MaxLen, and a
// delete counts them as ready and deletes the group keys.
func TestGroupCapAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{MaxLen: 2})
	ctx := context.Background()
	e.enqueue(groupedMsg("q", "a1", "g"), groupedMsg("q", "a2", "g"))
	err := e.d.Enqueue(ctx, []*broker.Message{msg("q", "b")})
	if !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("Enqueue past MaxLen with one job waiting in a line = %v, want ErrQueueFull", err)
	}
	del, err := e.d.DeleteQueue(ctx, "q", false)
	if err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if del.Ready != 2 || del.InFlight != 0 {
		t.Fatalf("DeleteQueue deleted %+v, want 2 ready (one in the stream, one in its group's line)", del)
	}
	if ks := e.groupKeys("q"); len(ks) != 0 {
		t.Fatalf("group keys left after the delete: %v", ks)
	}
}

// PrepareAdd refuses a grouped message: an application script's XADD
// would bypass its group.
func TestPrepareAddRefusesGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := groupedMsg("q", "a1", "g")
	m.EnqueuedAt = time.Now()
	_, err := e.d.PrepareAdd(m)
	var me *broker.MessageError
	if !errors.As(err, &me) || me.Field != "Group" {
		t.Fatalf("PrepareAdd of a grouped message = %v, want a *broker.MessageError on Group", err)
	}
}

// linesToSortedSet adds every member of queue's group_msgs, which must
// hold want, to its group_wait sorted set, as the older format kept them.
func (e *env) linesToSortedSet(queue string, want int) {
	e.t.Helper()
	ctx := context.Background()
	members, err := e.rdb.HKeys(ctx, e.key(queue, "group_msgs")).Result()
	if err != nil || len(members) != want {
		e.t.Fatalf("group_msgs fields = %v, %v; want %d", members, err, want)
	}
	for _, m := range members {
		if err := e.rdb.ZAdd(ctx, e.key(queue, "group_wait"), redis.Z{Member: m}).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// Groups stored by a version that kept every group's line in one sorted
// set (a state of "<admitted>,<limit>,<last place>", the waiting members
// in group_wait) are converted when a job of theirs is next enqueued or
// ends: their jobs still run in enqueue order, a job cancelled while
// waiting is skipped, and the sorted set empties.
func TestGroupLinesOfTheSortedSetFormatConvert(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	var all []*broker.Message
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		all = append(all, groupedMsg("q", id, "g"))
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		all = append(all, groupedMsg("q", id, "h"))
	}
	e.enqueue(all...)

	// Rewrite the groups as the sorted-set format stores them: a state of
	// "<admitted>,<limit>,<last place>" in the group's field, no head.
	states, err := e.rdb.HGetAll(ctx, e.key("q", "groups")).Result()
	if err != nil || len(states) != 4 || states["\x02g"] == "" || states["\x02h"] == "" {
		t.Fatalf("groups = %q, %v; want the counts and last place of 2 groups", states, err)
	}
	for _, g := range []string{"g", "h"} {
		last := strings.TrimLeft(states["\x02"+g], "0")
		if err := e.rdb.HSet(ctx, e.key("q", "groups"), g, states[g]+","+last).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.HDel(ctx, e.key("q", "groups"), "\x01"+g, "\x02"+g).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.linesToSortedSet("q", 6)

	// a3 is cancelled while it waits, before its group is converted.
	if st, err := e.d.CancelJob(ctx, "q", "a3"); err != nil || st != broker.JobReady {
		t.Fatalf("CancelJob(a3) = %v, %v; want ready (waiting in its group)", st, err)
	}
	// A job enqueued now joins h's line behind b2 and b3.
	e.enqueue(groupedMsg("q", "b4", "h"))

	c := e.open("q", time.Minute)
	var got []string
	for len(got) < 8 {
		ds := e.fetch(c, 10)
		got = append(got, ids(ds)...)
		if err := c.Ack(ctx, ds...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	var ga, gb []string
	for _, id := range got {
		if id[0] == 'a' {
			ga = append(ga, id)
		} else {
			gb = append(gb, id)
		}
	}
	if !slices.Equal(ga, []string{"a1", "a2", "a4", "a5"}) || !slices.Equal(gb, []string{"b1", "b2", "b3", "b4"}) {
		t.Fatalf("ran %v: group g in order %v, h %v; want [a1 a2 a4 a5] and [b1 b2 b3 b4]", got, ga, gb)
	}
	if ks := e.groupKeys("q"); len(ks) != 0 {
		t.Fatalf("group keys left after every job ended: %v", ks)
	}
}

// sizes returns queue's QueueSizes.
func (e *env) sizes(queue string) broker.QueueSizes {
	e.t.Helper()
	s, err := e.d.QueueSizes(context.Background(), queue)
	if err != nil || len(s) != 1 {
		e.t.Fatalf("QueueSizes(%q) = %v, %v", queue, s, err)
	}
	return s[0]
}

// A job that raises its group's limit past the number of jobs waiting in
// line lets them all in at once, however many: 9,000 waiting jobs are
// read in windows (one HMGET of them all would overflow Lua's unpack).
func TestGroupLimitRaisedPastALongLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const waiting = 9000
	var ms []*broker.Message
	for i := range waiting + 1 {
		ms = append(ms, groupedMsg("q", "j"+strconv.Itoa(i), "g"))
	}
	e.enqueue(ms...)
	if s := e.sizes("q"); s.Ready != 1 || s.Grouped != waiting {
		t.Fatalf("after %d jobs of one group: ready %d, grouped %d; want 1 and %d", waiting+1, s.Ready, s.Grouped, waiting)
	}
	m := groupedMsg("q", "raise", "g")
	m.GroupLimit = broker.MaxGroupLimit
	e.enqueue(m)
	if s := e.sizes("q"); s.Ready != waiting+2 || s.Grouped != 0 {
		t.Fatalf("after a job raised the limit to %d: ready %d, grouped %d; want %d and 0", broker.MaxGroupLimit, s.Ready, s.Grouped, waiting+2)
	}
}

// runInOrder fetches and acks on c, one job at a time (a group admits
// one), until the jobs of want have run, then checks they ran in want's
// order and the group keys are gone; each(k) runs after the k-th ack.
func (e *env) runInOrder(c broker.Consumer, want []string, each func(k int)) {
	e.t.Helper()
	var got []string
	for len(got) < len(want) {
		ds := e.fetch(c, 10)
		if len(ds) != 1 {
			e.t.Fatalf("fetched %v after %v: want one job of the group at a time", ids(ds), got)
		}
		got = append(got, ids(ds)...)
		if err := c.Ack(context.Background(), ds...); err != nil {
			e.t.Fatalf("Ack: %v", err)
		}
		if each != nil {
			each(len(got))
		}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("ran %v, want %v", got, want)
	}
	if ks := e.groupKeys("q"); len(ks) != 0 {
		e.t.Fatalf("group keys left after every job ended: %v", ks)
	}
}

// A group whose state field cannot be read (written by hand) while its
// jobs wait in the sorted set of the older format is recovered from that
// set: its jobs are let in, in order, one at a time.
func TestGroupUnreadableStateOfTheSortedSetFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(groupedMsg("q", "a1", "g"), groupedMsg("q", "a2", "g"), groupedMsg("q", "a3", "g"))
	e.linesToSortedSet("q", 2)
	if err := e.rdb.HDel(ctx, e.key("q", "groups"), "\x01g", "\x02g").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, e.key("q", "groups"), "g", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	e.runInOrder(e.open("q", time.Minute), []string{"a1", "a2", "a3"}, nil)
}

// A group of this format whose counts were written over by hand keeps its
// line: the jobs waiting there are let in, in order, none is overwritten.
func TestGroupUnreadableCountsKeepTheLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(groupedMsg("q", "b1", "g"), groupedMsg("q", "b2", "g"), groupedMsg("q", "b3", "g"))
	if err := e.rdb.HSet(ctx, e.key("q", "groups"), "g", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	e.runInOrder(e.open("q", time.Minute), []string{"b1", "b2", "b3", "b4"}, func(k int) {
		if k == 1 {
			// Enqueued once the state was read: it waits behind b2, b3.
			e.enqueue(groupedMsg("q", "b4", "g"))
		}
	})
}

// TestGroupedEnqueueThatFailsRecordsNothing: a grouped job whose store
// fails (here the stream key holds another type, written by hand) is not
// left recorded as admitted to its group: once the key is mended the same
// job is stored, not refused as a duplicate of itself.
func TestGroupedEnqueueThatFailsRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "grouped-fails"
	ctx := context.Background()
	m := msg(q, "a")
	m.Group = "order-1"
	k := e.key(q, "stream")
	if err := e.rdb.Set(ctx, k, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Enqueue(ctx, []*broker.Message{m}); err == nil {
		t.Fatal("a grouped Enqueue onto a stream key of another type returned nil")
	}
	if err := e.rdb.Del(ctx, k).Err(); err != nil {
		t.Fatal(err)
	}
	e.enqueue(m)
	c := e.open(q, time.Minute)
	d := e.fetch(c, 10)
	if len(d) != 1 || d[0].ID != "a" {
		t.Fatalf("fetched %v, want [a]", ids(d))
	}
	e.ack(c, d...)
}
