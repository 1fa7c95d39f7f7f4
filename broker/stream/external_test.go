package stream_test

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// appAdd is an application's own script that adds a job with a write of its
// own, as external.go's contract says.
//
//go:embed testdata/app_add.lua
var appAddSrc string

var appAdd = redis.NewScript(appAddSrc)

// addFromApp stores m with appAdd and returns the app counter's new value.
func (e *env) addFromApp(m *broker.Message) int64 {
	e.t.Helper()
	add, err := e.d.PrepareAdd(m)
	if err != nil {
		e.t.Fatalf("PrepareAdd(%s): %v", m.ID, err)
	}
	streamKey := add.StreamKey
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := appAdd.Run(ctx, e.rdb, []string{streamKey, e.key(m.Queue, "app:count")}, add.Group, add.Stored).Slice()
	if err != nil {
		e.t.Fatalf("app script adding %s: %v", m.ID, err)
	}
	// The stream must have the driver's group and no other: a consumer
	// would recreate a missing group (with a warning), but the driver's own
	// enqueue counts on it being there.
	groups, err := e.rdb.XInfoGroups(ctx, streamKey).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != e.d.Group() {
		e.t.Fatalf("stream groups after the app's add: %+v (%v); want only %q", groups, err, e.d.Group())
	}
	return v[1].(int64)
}

// checkNoGroupRepair fails t if a consumer had to recreate the group.
func (e *env) checkNoGroupRepair() {
	e.t.Helper()
	if w := e.logs.find(slog.LevelWarn, "group was missing"); w != "" {
		e.t.Fatalf("a consumer recreated the group: %s", w)
	}
}

func externalMsg(queue, id string) *broker.Message {
	return &broker.Message{
		ID: id, Kind: "order.create", Queue: queue, Payload: []byte(`{"order":"` + id + `"}`),
		Headers: map[string]string{"ip": "10.0.0.1"}, MaxAttempts: 7, Timeout: 3 * time.Second,
		EnqueuedAt: time.UnixMilli(time.Now().UnixMilli()),
	}
}

// sameMessage fails t unless got carries every field of want that the
// stored form keeps.
func sameMessage(t *testing.T, got *broker.Message, want *broker.Message) {
	t.Helper()
	if got.ID != want.ID || got.Kind != want.Kind || got.Queue != want.Queue || string(got.Payload) != string(want.Payload) ||
		!maps.Equal(got.Headers, want.Headers) || got.MaxAttempts != want.MaxAttempts || got.Timeout != want.Timeout ||
		!got.EnqueuedAt.Equal(want.EnqueuedAt) {
		t.Fatalf("delivered %+v, want %+v", *got, *want)
	}
}

func TestStoredRefusesWhatOnlyEnqueueDoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ok := externalMsg("q", "m1")
	if _, err := e.d.Stored(ok); err != nil {
		t.Fatalf("Stored of a valid message: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(m *broker.Message)
		want error
	}{
		"no ID":      {func(m *broker.Message) { m.ID = "" }, broker.ErrInvalidMessage},
		"no kind":    {func(m *broker.Message) { m.Kind = "" }, broker.ErrInvalidMessage},
		"bad queue":  {func(m *broker.Message) { m.Queue = "a{b}" }, broker.ErrInvalidQueue},
		"unique key": {func(m *broker.Message) { m.UniqueKey, m.UniqueTTL = "k", time.Minute }, broker.ErrInvalidMessage},
		"run-at":     {func(m *broker.Message) { m.RunAt = time.Now().Add(time.Minute) }, broker.ErrInvalidMessage},
		"past run-at": {func(m *broker.Message) { m.RunAt = time.Now().Add(-time.Minute) },
			broker.ErrInvalidMessage},
		"negative attempt": {func(m *broker.Message) { m.Retries = -1 }, broker.ErrInvalidMessage},
	} {
		m := *ok
		tc.edit(&m)
		if s, err := e.d.Stored(&m); !errors.Is(err, tc.want) {
			t.Errorf("%s: Stored = %q, %v; want %v", name, s, err, tc.want)
		}
	}
	if _, err := e.d.Stored(nil); !errors.Is(err, broker.ErrInvalidMessage) {
		t.Errorf("Stored(nil) = %v, want ErrInvalidMessage", err)
	}
}

// PrepareAdd gives the stream of the message's own queue with its stored
// form, so the two cannot disagree, and refuses what Stored refuses.
func TestPrepareAdd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{Group: "shop"})
	for _, q := range []string{"orders", "refunds"} {
		m := externalMsg(q, "m-"+q)
		add, err := e.d.PrepareAdd(m)
		if err != nil {
			t.Fatalf("PrepareAdd in %s: %v", q, err)
		}
		stored, err := e.d.Stored(m)
		if err != nil {
			t.Fatal(err)
		}
		if want := e.prefix + ":{" + q + "}:stream"; add.StreamKey != want || add.Group != "shop" || add.Stored != stored {
			t.Errorf("PrepareAdd in %s = {%q %q %q}; want {%q %q %q}", q, add.StreamKey, add.Group, add.Stored, want, "shop", stored)
		}
	}
	for name, edit := range map[string]func(m *broker.Message){
		"bad queue":  func(m *broker.Message) { m.Queue = "a{b}" },
		"no kind":    func(m *broker.Message) { m.Kind = "" },
		"unique key": func(m *broker.Message) { m.UniqueKey = "k" },
		"run-at":     func(m *broker.Message) { m.RunAt = time.Now().Add(time.Minute) },
	} {
		m := externalMsg("orders", "x")
		edit(m)
		add, err := e.d.PrepareAdd(m)
		if !errors.Is(err, broker.ErrInvalidMessage) && !errors.Is(err, broker.ErrInvalidQueue) {
			t.Errorf("%s: PrepareAdd = %+v, %v; want an invalid message or queue", name, add, err)
		}
		if add != (stream.ScriptAdd{}) {
			t.Errorf("%s: PrepareAdd returned %+v with its error", name, add)
		}
	}
	if _, err := e.d.PrepareAdd(nil); !errors.Is(err, broker.ErrInvalidMessage) {
		t.Errorf("PrepareAdd(nil) = %v, want ErrInvalidMessage", err)
	}
}

func TestStreamKeyAndGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if k, err := e.d.StreamKey("orders"); err != nil || k != e.prefix+":{orders}:stream" {
		t.Fatalf("StreamKey = %q, %v; want %q", k, err, e.prefix+":{orders}:stream")
	}
	if k, err := e.d.StreamKey("a}b"); !errors.Is(err, broker.ErrInvalidQueue) {
		t.Fatalf("StreamKey of a queue with a brace = %q, %v; want ErrInvalidQueue", k, err)
	}
	if g := e.d.Group(); g != "conveyor" {
		t.Fatalf("Group() = %q, want the default %q", g, "conveyor")
	}
	if g := newEnv(t, &stream.Config{Group: "shop"}).d.Group(); g != "shop" {
		t.Fatalf("Group() = %q, want the configured %q", g, "shop")
	}
}

// A job added by an application's script goes through the whole life of a
// job: fetched with every field intact, retried later (by the promoter),
// acked; and the script creates the stream and group again after the
// driver deleted the drained stream.
func TestAppScriptJobIsFetchedRetriedAcked(t *testing.T) {
	t.Parallel()
	const q = "orders"
	e := newEnv(t, nil)
	c := brokertest.Open(t, e.d, q, nil)
	brokertest.Promote(t, e.d, q)
	ctx := brokertest.Context(t, 30*time.Second)
	streamKey, _ := e.d.StreamKey(q)

	m1 := externalMsg(q, "m1")
	if n := e.addFromApp(m1); n != 1 {
		t.Fatalf("app counter = %d after the first add, want 1", n)
	}
	d := brokertest.FetchOne(t, c, 5*time.Second)
	sameMessage(t, &d.Message, m1)
	if d.Retries != 0 || d.Recoveries != 0 || d.ConsumerGroup != "conveyor" {
		t.Fatalf("first delivery: attempt %d recoveries %d group %q", d.Retries, d.Recoveries, d.ConsumerGroup)
	}
	at := time.Now().Add(300 * time.Millisecond)
	if err := c.Retry(ctx, d, at); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	d = brokertest.FetchOne(t, c, 10*time.Second)
	if now := time.Now(); now.Before(at.Add(-50 * time.Millisecond)) {
		t.Fatalf("retry delivered %v before its time", at.Sub(now))
	}
	sameMessage(t, &d.Message, m1)
	if d.Retries != 1 {
		t.Fatalf("retried delivery has attempt %d, want 1", d.Retries)
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	// Drained: the stream stays, with its group, and the app's script
	// appends to it.
	if !redistest.DrainedStream(t, e.rdb, streamKey) {
		t.Fatal("the stream holds entries after the last ack")
	}
	m2 := externalMsg(q, "m2")
	if n := e.addFromApp(m2); n != 2 {
		t.Fatalf("app counter = %d after the second add, want 2", n)
	}
	d = brokertest.FetchOne(t, c, 5*time.Second)
	sameMessage(t, &d.Message, m2)
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	// Mixed with the driver's own Enqueue (its XADD NOMKSTREAM fast path
	// relies on the group existing with the stream): FIFO across both.
	m3, m4, m5 := externalMsg(q, "m3"), externalMsg(q, "m4"), externalMsg(q, "m5")
	brokertest.Enqueue(t, e.d, m3)
	e.addFromApp(m4)
	brokertest.Enqueue(t, e.d, m5)
	ds := brokertest.FetchN(t, c, 3, 3, 5*time.Second)
	for i, want := range []*broker.Message{m3, m4, m5} {
		sameMessage(t, &ds[i].Message, want)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	brokertest.ExpectNone(t, c, 200*time.Millisecond)
	e.checkNoGroupRepair()
	if err := e.rdb.Del(ctx, e.key(q, "app:count")).Err(); err != nil {
		t.Fatal(err)
	}
	brokertest.AssertNoKeys(t, e.prefix)
}

// A job added by an application's script whose consumer dies is taken over
// after its lease, counted as a recovery, and can be discarded like any
// other, under a configured group name.
func TestAppScriptJobIsRecoveredAndDiscarded(t *testing.T) {
	t.Parallel()
	const q = "orders"
	e := newEnv(t, &stream.Config{Group: "shop"})
	lease := &broker.ConsumerOptions{VisibilityTimeout: 200 * time.Millisecond}
	dead := brokertest.Open(t, e.d, q, lease)
	m := externalMsg(q, "crash-1")
	e.addFromApp(m)
	d0 := brokertest.FetchOne(t, dead, 5*time.Second)
	if d0.ConsumerGroup != "shop" {
		t.Fatalf("delivered under group %q, want shop", d0.ConsumerGroup)
	}
	// The first consumer never settles: its lease runs out and another
	// consumer of the group takes the job over.
	live := brokertest.Open(t, e.d, q, lease)
	d1 := brokertest.FetchOne(t, live, 5*time.Second)
	sameMessage(t, &d1.Message, m)
	if d1.Recoveries != 1 || d1.Retries != 0 {
		t.Fatalf("taken over with recoveries %d attempt %d, want 1 and 0", d1.Recoveries, d1.Retries)
	}
	ctx := brokertest.Context(t, 30*time.Second)
	if err := dead.Ack(ctx, d0); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack by the consumer whose lease ran out = %v, want ErrLeaseLost", err)
	}
	if err := live.Discard(ctx, d1, "out of stock"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	rec, err := e.d.GetDiscarded(ctx, q, m.ID)
	if err != nil || rec == nil {
		t.Fatalf("GetDiscarded = %v, %v; want the record", rec, err)
	}
	if rec.Reason != "out of stock" || rec.Recoveries != 1 {
		t.Fatalf("discard record reason %q recoveries %d", rec.Reason, rec.Recoveries)
	}
	sameMessage(t, &rec.Message, m)
	e.checkNoGroupRepair()
	if _, err := e.d.PurgeDiscarded(ctx, q, broker.DiscardFilter{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, e.key(q, "app:count")).Err(); err != nil {
		t.Fatal(err)
	}
	brokertest.AssertNoKeys(t, e.prefix)
}
