package conveyortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
	"github.com/conveyorq/conveyor/retry"
)

func resultIDs(rs []*conveyortest.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Job.ID
	}
	return out
}

// While a grouped job runs, a Runner hands its group's next job to no one,
// not even to another goroutine's Work, and a job that failed holds its
// group until its retry succeeds: a group's jobs run one at a time, in
// enqueue order, and other jobs are not held back.
func TestRunnerRunsAGroupOneAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	started, finish := make(chan string, 1), make(chan struct{})
	var mu sync.Mutex
	var ran []string
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		ran = append(ran, job.ID)
		mu.Unlock()
		switch {
		case job.ID == "a1":
			started <- job.ID
			<-finish
		case job.ID == "a2" && job.Attempt() == 1:
			return errors.New("downstream down")
		}
		return nil
	})
	r := e.runner(t, h, &conveyortest.RunnerConfig{Retry: &retry.Rules{Policy: retry.Constant(time.Minute)}})
	for _, id := range []string{"a1", "a2", "a3"} {
		e.enqueue(t, "order.event", nil, &conveyor.EnqueueOptions{ID: id, Group: "order-1"})
	}
	e.enqueue(t, "order.event", nil, &conveyor.EnqueueOptions{ID: "b1", Group: "order-2"})
	e.enqueue(t, "other", nil, &conveyor.EnqueueOptions{ID: "x"})

	done := make(chan *conveyortest.Result, 1)
	go func() {
		res, err := r.Work(ctx, "default")
		if err != nil {
			t.Errorf("Work: %v", err)
		}
		done <- res
	}()
	expect(t, started, "a1")
	if got := resultIDs(drain(t, r, "default")); !slices.Equal(got, []string{"b1", "x"}) {
		t.Fatalf("while a1 runs, a drain ran %v, want [b1 x]: a2 waits for a1", got)
	}
	close(finish)
	if res := <-done; res == nil || res.Settlement.Outcome != conveyor.OutcomeAcked {
		t.Fatalf("a1: %+v, want acked", res)
	}

	res := drain(t, r, "default")
	if got := resultIDs(res); !slices.Equal(got, []string{"a2"}) || res[0].Settlement.Outcome != conveyor.OutcomeRetried {
		t.Fatalf("after a1 was acked, a drain ran %v (%v), want [a2] retried: a3 waits for a2's retry", got, outcomes(res))
	}
	e.clock.Advance(time.Minute)
	res = drain(t, r, "default")
	if got := resultIDs(res); !slices.Equal(got, []string{"a2", "a3"}) || res[0].Job.Attempt() != 2 {
		t.Fatalf("after the retry came due, a drain ran %v (a2 on attempt %d), want [a2 a3], a2 on attempt 2", got, res[0].Job.Attempt())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a1", "b1", "x", "a2", "a2", "a3"}; !slices.Equal(ran, want) {
		t.Fatalf("handler runs %v, want %v", ran, want)
	}
}

// Goroutines draining one queue at once, as a pool's workers fetch, run
// each group's jobs one at a time and in enqueue order.
func TestRunnerConcurrentDrainsKeepGroupOrder(t *testing.T) {
	t.Parallel()
	const groups, perGroup, workers = 4, 25, 8
	e := newEnv(t)
	ctx := context.Background()
	type step struct {
		Group string `json:"group"`
		Seq   int    `json:"seq"`
	}
	var mu sync.Mutex
	running, last := map[string]int{}, map[string]int{}
	var violations []string
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		var s step
		if err := json.Unmarshal(job.Payload, &s); err != nil {
			return conveyor.SkipRetry(err)
		}
		mu.Lock()
		if running[s.Group] > 0 {
			violations = append(violations, fmt.Sprintf("%s #%d ran beside another job of its group", s.Group, s.Seq))
		}
		if s.Seq != last[s.Group]+1 {
			violations = append(violations, fmt.Sprintf("%s #%d ran after #%d", s.Group, s.Seq, last[s.Group]))
		}
		running[s.Group]++
		mu.Unlock()
		runtime.Gosched() // let the other goroutines fetch while this job runs
		mu.Lock()
		running[s.Group]--
		last[s.Group] = s.Seq
		mu.Unlock()
		return nil
	})
	r := e.runner(t, h, nil)
	for i := 1; i <= perGroup; i++ {
		for g := range groups {
			name := fmt.Sprintf("order-%d", g)
			e.enqueue(t, "order.event", step{Group: name, Seq: i}, &conveyor.EnqueueOptions{Group: name})
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Drain(ctx, "default"); err != nil {
				t.Errorf("Drain: %v", err)
			}
		}()
	}
	wg.Wait()
	// A drain ends when every admitted job is out with another goroutine:
	// what is left runs now.
	drain(t, r, "default")
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("group order broken: %s", strings.Join(violations, "; "))
	}
	for g := range groups {
		if name := fmt.Sprintf("order-%d", g); last[name] != perGroup {
			t.Fatalf("group %s ended at #%d, want #%d", name, last[name], perGroup)
		}
	}
}

// A job waiting in its group's line is enqueued: Enqueued lists it, the
// Inspector counts it as ready, DeleteQueue deletes and counts it, and
// the delete forgets the queue's groups.
func TestGroupLineIsVisible(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"a1", "a2", "a3"} {
		e.enqueue(t, "order.event", Receipt{OrderID: id}, &conveyor.EnqueueOptions{ID: id, Group: "order-1", GroupLimit: 2})
	}
	e.enqueue(t, "other", Receipt{}, &conveyor.EnqueueOptions{ID: "x"})
	jobs := conveyortest.Enqueued[Receipt](t, e.d, "default")
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"a1", "a2", "x", "a3"}; !slices.Equal(ids, want) {
		t.Fatalf("Enqueued lists %v, want %v (a3 waits in its group's line)", ids, want)
	}
	a1 := jobs[0]
	if a1.Group != "order-1" || a1.Headers[broker.HeaderGroup] != "order-1" || a1.GroupLimit != 0 {
		t.Fatalf("stored job: Group %q, header %q, GroupLimit %d; want order-1 in both, and no limit (the Redis drivers store none)",
			a1.Group, a1.Headers[broker.HeaderGroup], a1.GroupLimit)
	}
	if s := sizes(t, e.d, "default"); s.Ready != 3 || s.Grouped != 1 {
		t.Fatalf("ready %d, grouped %d; want 3 and 1 (one waiting in line)", s.Ready, s.Grouped)
	}
	del, err := e.d.DeleteQueue(ctx, "default", false)
	if err != nil || del.Ready != 4 {
		t.Fatalf("DeleteQueue: ready %d, %v; want 4", del.Ready, err)
	}
	// The group is gone with its jobs: an ID it held is free and its job
	// is admitted at once.
	e.enqueue(t, "order.event", Receipt{}, &conveyor.EnqueueOptions{ID: "a3", Group: "order-1"})
	if s := sizes(t, e.d, "default"); s.Ready != 1 {
		t.Fatalf("after the delete, ready %d, want 1", s.Ready)
	}
	res := drain(t, e.runner(t, conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil }), nil), "default")
	if got := resultIDs(res); !slices.Equal(got, []string{"a3"}) || res[0].Job.Group != "order-1" {
		t.Fatalf("after the delete, a drain ran %v, want [a3] of group order-1", got)
	}
}

// A job of a group ends, letting the next one in, when it is discarded as
// poison by its lease's last expiry, when the timer of its retry is
// cancelled, and when a purge takes it from the ready list or the timers.
func TestGroupJobEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(t *testing.T, e *env) broker.Consumer {
		c, err := e.d.Open(ctx, "default", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	fetch := func(t *testing.T, c broker.Consumer, want string) *broker.Delivery {
		t.Helper()
		ds, err := c.Fetch(ctx, 10)
		if err != nil || len(ds) != 1 || ds[0].ID != want {
			t.Fatalf("Fetch: %d deliveries (%v), want %s alone", len(ds), err, want)
		}
		return ds[0]
	}
	enqueue := func(t *testing.T, e *env) {
		for _, id := range []string{"a1", "a2"} {
			e.enqueue(t, "order.event", nil, &conveyor.EnqueueOptions{ID: id, Group: "order-1"})
		}
	}

	t.Run("poison", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := open(t, e)
		enqueue(t, e)
		for range broker.DefaultMaxRecoveries {
			fetch(t, c, "a1")
			e.clock.Advance(broker.DefaultVisibilityTimeout)
		}
		fetch(t, c, "a2")
		if rec, err := e.d.GetDiscarded(ctx, "default", "a1"); err != nil || rec == nil || !strings.Contains(rec.Reason, broker.PoisonReason) {
			t.Fatalf("discard record of a1: %+v, %v; want one for poison", rec, err)
		}
	})
	t.Run("timer cancelled", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := open(t, e)
		enqueue(t, e)
		if err := c.Retry(ctx, fetch(t, c, "a1"), e.d.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.d.Cancel(ctx, "default", "a1"); !ok || err != nil {
			t.Fatalf("Cancel of a1's retry = %v, %v; want true", ok, err)
		}
		fetch(t, c, "a2")
	})
	t.Run("ready purged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := open(t, e)
		enqueue(t, e)
		if n, err := e.d.PurgeReady(ctx, "default", 0); n != 1 || err != nil {
			t.Fatalf("PurgeReady = %d, %v; want 1 (a1; a2 waited in line)", n, err)
		}
		fetch(t, c, "a2")
	})
	t.Run("delayed purged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := open(t, e)
		enqueue(t, e)
		if err := c.Postpone(ctx, fetch(t, c, "a1"), e.d.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if n, err := e.d.PurgeDelayed(ctx, "default", 0); n != 1 || err != nil {
			t.Fatalf("PurgeDelayed = %d, %v; want 1", n, err)
		}
		fetch(t, c, "a2")
	})
}

// The Redis drivers refuse a delayed grouped job; the driver judges the
// delay by its own clock, so a Delay on a fake clock that stands behind
// the system's is refused too.
func TestGroupedJobCannotBeDelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // at conveyortest.DefaultStart, in the system clock's past
	_, err := e.client.Enqueue(context.Background(), "order.event", nil, &conveyor.EnqueueOptions{Group: "order-1", Delay: time.Minute})
	var me *broker.MessageError
	if !errors.As(err, &me) || me.Field != "Group" {
		t.Fatalf("Enqueue of a delayed grouped job: %v, want a *broker.MessageError on Group", err)
	}
	if n := len(conveyortest.Enqueued[[]byte](t, e.d, "default")); n != 0 {
		t.Fatalf("the refused job was stored (%d jobs wait)", n)
	}
}

// Process cannot run at once a job its group keeps waiting: it says so,
// and Drain runs the job in its turn.
func TestProcessOfAJobWaitingInLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.runner(t, conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil }), nil)
	e.enqueue(t, "order.event", nil, &conveyor.EnqueueOptions{ID: "a1", Group: "order-1"})
	_, err := r.Process(context.Background(), "order.event", nil, &conveyor.EnqueueOptions{ID: "a2", Group: "order-1"})
	if err == nil || !strings.Contains(err.Error(), "line") {
		t.Fatalf("Process of a job waiting in line: %v, want an error saying it waits", err)
	}
	if got := resultIDs(drain(t, r, "default")); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("drain ran %v, want [a1 a2]", got)
	}
}
