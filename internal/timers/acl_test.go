package timers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Redis 7 refuses a PUBLISH to a channel the ACL user may not use
// (acl-pubsub-default resetchannels) when the script reaches it, after the
// writes before it. Every script that may wake the promoters must be
// refused before its first write instead: these tests run each one as a
// user with every permission but the channels, and check that the call
// fails and that Redis holds what it held before.

// withoutChannels runs f on each durable driver, in parallel subtests, with
// user logged in as a user with the least-privilege ACL but no channel,
// admin as the tests' own user, both on prefix.
func withoutChannels(t *testing.T, f func(t *testing.T, user, admin broker.Driver, prefix string)) {
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			_, c := redistest.ACLUser(t, redistest.Without(redistest.LeastPrivilege(prefix), "&"+prefix+":*")...)
			f(t, drv.Must(t, c, prefix), drv.Must(t, redistest.Client(t), prefix), prefix)
		})
	}
}

// wantRefused fails t unless err is the refusal of the wake-up's PUBLISH.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "publish") || !strings.Contains(err.Error(), "}:wake") {
		t.Fatalf("%s without channel permission: err = %v, want the refusal of the PUBLISH to the wake channel", what, err)
	}
}

// keysUnder returns the keys under prefix, less the Inspector's bookkeeping.
func keysUnder(t *testing.T, prefix string) []string {
	t.Helper()
	return redistest.Keys(t, redistest.Client(t), prefix)
}

func job(id string, runAt time.Time) *broker.Message {
	return &broker.Message{ID: id, Kind: "k", Queue: "q", Payload: []byte("p"), RunAt: runAt}
}

func TestDelayedEnqueueWithoutChannelPermissionStoresNothing(t *testing.T) {
	t.Parallel()
	withoutChannels(t, func(t *testing.T, user, _ broker.Driver, prefix string) {
		ctx := context.Background()
		// The first message writes (its unique key) before the delayed
		// one is reached: the refusal must come before both.
		first := job("now", time.Time{})
		first.UniqueKey, first.UniqueTTL = "u", time.Hour
		err := user.Enqueue(ctx, []*broker.Message{first, job("later", time.Now().Add(time.Hour))})
		wantRefused(t, "delayed Enqueue", err)
		if ks := keysUnder(t, prefix); len(ks) > 0 {
			t.Fatalf("the refused Enqueue stored %v", ks)
		}
		// The same user may still enqueue what wakes nobody.
		if err := user.Enqueue(ctx, []*broker.Message{first}); err != nil {
			t.Fatalf("Enqueue of a job due now: %v", err)
		}
	})
}

func TestRetryLaterWithoutChannelPermissionKeepsTheLease(t *testing.T) {
	t.Parallel()
	withoutChannels(t, func(t *testing.T, user, _ broker.Driver, prefix string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := user.Enqueue(ctx, []*broker.Message{job("j", time.Time{})}); err != nil {
			t.Fatal(err)
		}
		c, err := user.Open(ctx, "q", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		ds, err := c.Fetch(ctx, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("fetch: %d deliveries, %v", len(ds), err)
		}
		wantRefused(t, "Retry later", c.Retry(ctx, ds[0], time.Now().Add(time.Hour)))
		wantRefused(t, "Postpone", c.Postpone(ctx, ds[0], time.Now().Add(time.Hour)))
		if n, err := redistest.Client(t).ZCard(ctx, timers.QueueKeys(prefix, "q").Delayed).Result(); err != nil || n != 0 {
			t.Fatalf("the refused retry stored %d timers (%v)", n, err)
		}
		// Nothing was written: the delivery still holds its lease, and
		// a retry due now, which wakes nobody, is not refused.
		if err := c.Retry(ctx, ds[0], time.Now().Add(-time.Second)); err != nil {
			t.Fatalf("Retry due now after the refused ones: %v, want the lease kept", err)
		}
		if ds, err = c.Fetch(ctx, 1); err != nil || len(ds) != 1 || ds[0].Retries != 1 {
			t.Fatalf("fetch of the retried job: %v, %v", ds, err)
		}
	})
}

func TestRescheduleAndFireWithoutChannelPermissionChangeNothing(t *testing.T) {
	t.Parallel()
	withoutChannels(t, func(t *testing.T, user, admin broker.Driver, prefix string) {
		ctx := context.Background()
		due := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
		if err := admin.Enqueue(ctx, []*broker.Message{job("t", due)}); err != nil {
			t.Fatal(err)
		}
		_, err := user.(broker.Timers).Reschedule(ctx, "q", "t", time.Now().Add(time.Hour))
		wantRefused(t, "Reschedule ahead of the earliest timer", err)
		score, err := redistest.Client(t).ZScore(ctx, timers.QueueKeys(prefix, "q").Delayed, "t").Result()
		// The due time is the server's now plus the wait, so it matches
		// the local one to the clocks' difference, here well under a
		// second; the refused move would have taken it an hour earlier.
		if d := int64(score) - due.UnixMilli(); err != nil || d < -1000 || d > 1000 {
			t.Fatalf("timer due at %v (%v) after the refused Reschedule, want about %v", int64(score), err, due.UnixMilli())
		}
		// Behind the earliest timer, a move wakes nobody: not refused.
		if ok, err := user.(broker.Timers).Reschedule(ctx, "q", "t", due.Add(time.Hour)); err != nil || !ok {
			t.Fatalf("Reschedule behind the earliest timer: %v, %v", ok, err)
		}

		fire := job("fire-1", time.Now().Add(10*time.Second))
		fire.Queue = "cron"
		_, err = user.(broker.Timers).EnqueueFire(ctx, "series", fire, time.Hour)
		wantRefused(t, "EnqueueFire", err)
		for _, k := range keysUnder(t, prefix) {
			if strings.Contains(k, "{cron}") {
				t.Errorf("the refused EnqueueFire stored %s", k)
			}
		}
	})
}
