package redischeck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCheckNamesWhatTheACLRefuses: for each durable driver, a user with
// the documented least-privilege ACL passes Check and can run a queue
// (see runQueue); a user missing one permission fails Check with an error
// naming it, instead of passing and leaving the pool to log "fetch
// failed; retrying" forever.
func TestCheckNamesWhatTheACLRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// change turns the least-privilege rules under prefix into the
		// case's.
		change func(rules []string, prefix string) []string
		want   func(prefix string) string // in Check's error; nil: none
	}{
		{"least privilege", func(r []string, _ string) []string { return r }, nil},
		{"no EVALSHA", drop("+evalsha"), says("may not run EVALSHA")},
		{"no TIME", drop("+time"), says("may not run TIME")},
		{"no sorted sets", drop("+@sortedset"), says("may not run ZRANGEBYLEX")},
		{"no channels", func(r []string, p string) []string { return redistest.Without(r, "&"+p+":*") },
			func(p string) string { return "may not PUBLISH to channel " + p + ":{}:wake" }},
		{"other keys", func(r []string, p string) []string { return append(redistest.Without(r, "~"+p+":*"), "~other:*") },
			func(p string) string { return "may not access keys " + p + ":{}:" }},
	}
	for _, drv := range drivertest.Durable {
		for _, tc := range cases {
			t.Run(drv.Name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				user, c := redistest.ACLUser(t, tc.change(redistest.LeastPrivilege(prefix), prefix)...)
				d := drv.Must(t, c, prefix)
				err := d.Check(context.Background())
				if tc.want == nil {
					if err != nil {
						t.Fatalf("Check: %v", err)
					}
					runQueue(t, d)
					return
				}
				want := tc.want(prefix)
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `ACL user "`+user+`"`) {
					t.Fatalf("Check = %v, want an error naming user %s and saying %q", err, user, want)
				}
			})
		}
	}
}

func drop(rule string) func([]string, string) []string {
	return func(r []string, _ string) []string { return redistest.Without(r, rule) }
}

func says(s string) func(string) string { return func(string) string { return s } }

// runQueue enqueues (plain, with a unique key, delayed), watches the timers
// as a promoter does, fetches, acks, retries later, moves the delayed job's
// timer to now, promotes, fetches and discards it: the calls a pool, its
// promoter and a producer make.
func runQueue(t *testing.T, d broker.Driver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const q = "q"
	tm := d.(broker.Timers)
	wake, err := tm.WatchTimers(ctx, q)
	if err != nil {
		t.Fatalf("WatchTimers: %v", err)
	}
	plain, unique, later := brokertest.NewMessage(q, 1), brokertest.NewMessage(q, 2), brokertest.NewMessage(q, 3)
	unique.UniqueKey, unique.UniqueTTL = "u", time.Hour
	later.RunAt = time.Now().Add(time.Hour)
	for _, m := range []*broker.Message{plain, unique, later} {
		if err := d.Enqueue(ctx, []*broker.Message{m}); err != nil {
			t.Fatalf("Enqueue %s: %v", m.ID, err)
		}
	}
	select {
	case <-wake: // the delayed job's wake-up
	case <-ctx.Done():
		t.Fatal("no wake-up for the delayed job")
	}
	c, err := d.Open(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ds := fetch(ctx, t, c, 2)
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := c.Retry(ctx, ds[1], time.Now().Add(2*time.Hour)); err != nil {
		t.Fatalf("Retry later: %v", err)
	}
	if ok, err := tm.Reschedule(ctx, q, later.ID, time.Now().Add(-time.Second)); err != nil || !ok {
		t.Fatalf("Reschedule: %v, %v", ok, err)
	}
	if p, err := tm.Promote(ctx, q, 10); err != nil || p.Promoted != 1 {
		t.Fatalf("Promote: %+v, %v", p, err)
	}
	ds = fetch(ctx, t, c, 1)
	if ds[0].ID != later.ID {
		t.Fatalf("fetched %s, want the promoted %s", ds[0].ID, later.ID)
	}
	if err := c.Discard(ctx, ds[0], "test"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
}

// fetch fetches until it holds n deliveries.
func fetch(ctx context.Context, t *testing.T, c broker.Consumer, n int) []*broker.Delivery {
	t.Helper()
	var out []*broker.Delivery
	for len(out) < n {
		ds, err := c.Fetch(ctx, n-len(out))
		if err != nil {
			t.Fatalf("Fetch after %d of %d: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}
