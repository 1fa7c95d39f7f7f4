package list_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestInspectRegistry: a queue joins the registry on the driver's first
// enqueue to it, in the same round trip, and on its first Open; after that
// nothing more is sent for it.
func TestInspectRegistry(t *testing.T) {
	t.Parallel()
	rc := redistest.NewClient(t)
	log := &drivertest.CmdLog{}
	rc.AddHook(log)
	e := newEnvOn(t, rc, nil)
	ctx := context.Background()

	e.enqueue(msg("a", "1"))
	log.Expect(t, "first plain enqueue to a", []string{"lpush", "zadd", "sadd"})
	e.enqueue(msg("a", "2"))
	log.Expect(t, "second plain enqueue to a", []string{"lpush", "zadd"})

	late := msg("b", "1")
	late.RunAt = time.Now().Add(time.Hour)
	e.enqueue(late)
	log.ExpectScripted(t, "first scripted enqueue to b", []string{"evalsha", "sadd"})
	late2 := msg("b", "2")
	late2.RunAt = time.Now().Add(time.Hour)
	e.enqueue(late2)
	log.ExpectScripted(t, "second scripted enqueue to b", []string{"evalsha"})

	e.enqueue(msg("c", "1"), msg("d", "1"), msg("a", "3"), msg("c", "2"))
	log.ExpectScripted(t, "first batch to c and d", []string{"evalsha", "evalsha", "evalsha", "sadd"})

	e.open("e", time.Minute)
	log.Expect(t, "first Open of e", []string{"sadd"})
	e.open("e", time.Minute)
	e.open("a", time.Minute)
	log.Expect(t, "Open of known queues")

	qs, err := e.d.Queues(ctx)
	if want := []string{"a", "b", "c", "d", "e"}; err != nil || !slices.Equal(qs, want) {
		t.Fatalf("Queues = %q, %v; want %q", qs, err, want)
	}
	// Another driver on the same prefix (another process) reads the same
	// registry; a member written by hand that is no queue name is left out.
	other, err := list.New(rc, &list.Config{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.SAdd(ctx, e.prefix+":queues", "bad{name}").Err(); err != nil {
		t.Fatal(err)
	}
	if qs2, err := other.Queues(ctx); err != nil || !slices.Equal(qs2, qs) {
		t.Fatalf("another driver's Queues = %q, %v; want %q", qs2, err, qs)
	}
}

// TestInspectUndecodable: a stored message Go cannot decode is listed and
// found with Raw set (and its ID when the header is readable) instead of
// failing the page.
func TestInspectUndecodable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	good := codec.Encode(msg("q", "good"), 1)
	bad := []byte("1,1,0,0,3:badGARBAGE")
	if err := e.c.LPush(ctx, e.key("q", "ready"), good, bad, "junk").Err(); err != nil {
		t.Fatal(err)
	}
	js, total, err := e.d.ListJobs(ctx, "q", broker.JobReady, 0, 10)
	if err != nil || total != 3 || len(js) != 3 {
		t.Fatalf("ListJobs = %d jobs of %d, %v; want 3", len(js), total, err)
	}
	if js[0].ID != "good" || js[0].Raw != nil || string(js[0].Payload) != "payload of good" {
		t.Errorf("first job %+v, want good, decoded", js[0])
	}
	if js[1].ID != "bad" || string(js[1].Raw) != string(bad) {
		t.Errorf("second job ID %q Raw %q, want bad and its stored form", js[1].ID, js[1].Raw)
	}
	if js[2].ID != "" || string(js[2].Raw) != "junk" {
		t.Errorf("third job ID %q Raw %q, want no ID and junk", js[2].ID, js[2].Raw)
	}
	if j, err := e.d.FindJob(ctx, "q", broker.JobReady, "bad"); err != nil || j == nil || string(j.Raw) != string(bad) {
		t.Fatalf("FindJob(bad) = %+v, %v; want it with Raw", j, err)
	}
}
