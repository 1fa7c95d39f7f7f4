package brokertest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// ReplicaFactory builds the driver under test on rdb, with its keys under
// prefix, waiting for replicas replicas at most timeout on each enqueue
// (the driver's WaitReplicas and WaitTimeout). Its error is the driver's
// constructor's.
type ReplicaFactory func(t *testing.T, rdb redis.UniversalClient, prefix string, replicas int, timeout time.Duration) (broker.Driver, error)

// RunReplicaWait checks a driver's wait for replicas against a master and
// a replica of its own (two redis-servers the test starts): an Enqueue
// that returns nil has its jobs on the replica, a replica that does not
// answer makes Enqueue return a *broker.ReplicationError after the timeout
// with the jobs stored on the master, and the configuration is validated.
// The replica is stopped with SIGSTOP (by its PID) to hold replication back.
func RunReplicaWait(t *testing.T, open ReplicaFactory) {
	t.Run("Acknowledged", func(t *testing.T) {
		t.Parallel()
		master, replica := startReplicated(t)
		d, err := open(t, master, "rw", 1, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []*broker.Message{NewMessage("a", 1), NewMessage("a", 2), NewMessage("b", 1)}
		delayed := NewMessage("a", 3)
		delayed.RunAt = time.Now().Add(time.Hour)
		again := NewMessage("a", 3) // the pending timer's ID: refused
		again.RunAt = delayed.RunAt
		for _, c := range []struct {
			batch []*broker.Message
			dup   bool
		}{{msgs[:1], false}, {msgs, false}, {[]*broker.Message{delayed}, false}, {[]*broker.Message{again, NewMessage("a", 4)}, true}} {
			before := lenOf(t, master)
			stop := stopReplica(t, replica)
			done := make(chan error, 1)
			go func() { done <- d.Enqueue(Context(t, 30*time.Second), c.batch) }()
			redistest.Eventually(t, "the master to store the batch", func() bool { return lenOf(t, master) > before })
			select {
			case err := <-done:
				t.Fatalf("Enqueue returned (%v) while its replica was stopped: it did not wait for it", err)
			default:
			}
			stop()
			err := <-done
			var dup *broker.DuplicateError
			switch {
			case c.dup && (!errors.As(err, &dup) || errors.Is(err, broker.ErrNotReplicated)):
				t.Fatalf("Enqueue of a refused duplicate and a new job: %v, want only the *broker.DuplicateError", err)
			case !c.dup && err != nil:
				t.Fatalf("Enqueue of %d messages: %v", len(c.batch), err)
			}
			if m, r := digest(t, master), digest(t, replica); m != r {
				t.Fatalf("after Enqueue returned, the replica holds %s and the master %s", r, m)
			}
		}
		for _, q := range []string{"a", "b"} {
			c := Open(t, d, q, nil)
			Ack(t, c, FetchOne(t, c, 5*time.Second))
		}
	})
	t.Run("TimedOut", func(t *testing.T) {
		t.Parallel()
		master, replica := startReplicated(t)
		d, err := open(t, master, "rw", 1, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		stop := stopReplica(t, replica)
		err = d.Enqueue(Context(t, 30*time.Second), []*broker.Message{NewMessage("q", 1)})
		stop()
		var (
			rerr *broker.ReplicationError
			qerr *broker.QueueError
		)
		if !errors.As(err, &rerr) || !errors.Is(err, broker.ErrNotReplicated) || rerr.Acked != 0 || rerr.Wanted != 1 {
			t.Fatalf("Enqueue with its replica stopped: %v, want a *broker.ReplicationError of 0 of 1 replicas", err)
		}
		// It names the queue, so that a Client sharing the round trip
		// among calls gives it to the calls of that queue only.
		if !errors.As(err, &qerr) || qerr.Queue != "q" {
			t.Fatalf("Enqueue with its replica stopped: %v, want it in a *broker.QueueError naming queue q", err)
		}
		// The job was stored all the same, and runs.
		c := Open(t, d, "q", nil)
		if got := FetchOne(t, c, 5*time.Second); got.ID != "q-000001" {
			t.Fatalf("fetched %q, want the job whose wait timed out", got.ID)
		}
	})
	t.Run("CheckAsksForWait", func(t *testing.T) {
		t.Parallel()
		// The documented least-privilege user has no WAIT: Check of a
		// driver that waits for replicas must name it.
		_, user := redistest.ACLUser(t, redistest.LeastPrivilege("rwcheck")...)
		for _, n := range []int{0, 1} {
			d, err := open(t, user, "rwcheck", n, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = d.Check(Context(t, 10*time.Second))
			if n == 0 && err != nil {
				t.Fatalf("Check without WaitReplicas: %v", err)
			}
			if n == 1 && (err == nil || !strings.Contains(err.Error(), "WAIT")) {
				t.Fatalf("Check with WaitReplicas for a user without WAIT: %v, want an error naming WAIT", err)
			}
		}
	})
	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		rdb := Client(t)
		for _, c := range []struct {
			n       int
			timeout time.Duration
			want    string
		}{{-1, 0, "WaitReplicas"}, {1, -time.Second, "WaitTimeout"}, {1, time.Microsecond, "WaitTimeout"}} {
			if _, err := open(t, rdb, "rw", c.n, c.timeout); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("WaitReplicas %d, WaitTimeout %v: error %v, want one naming %s", c.n, c.timeout, err, c.want)
			}
		}
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
		t.Cleanup(func() { _ = ring.Close() })
		if _, err := open(t, ring, "rw", 1, 0); err == nil || !strings.Contains(err.Error(), "Ring") {
			t.Errorf("WaitReplicas on a Ring: error %v, want one saying a Ring cannot wait", err)
		}
		if _, err := open(t, ring, "rw", 0, 0); err != nil {
			t.Errorf("a Ring without WaitReplicas: %v", err)
		}
	})
}

// startReplicated starts a master and a replica of it, and waits until the
// replica is in sync.
func startReplicated(t *testing.T) (master, replica *redis.Client) {
	t.Helper()
	m := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
	port := m.Addr[strings.LastIndexByte(m.Addr, ':')+1:]
	r := redistest.StartServer(t, "--replicaof", "127.0.0.1", port)
	master, replica = m.Client(t), r.Client(t)
	redistest.Eventually(t, "the replica to sync", func() bool {
		info, err := replica.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	redistest.Eventually(t, "the master to see its replica", func() bool {
		info, err := master.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1")
	})
	return master, replica
}

// stopReplica SIGSTOPs the replica's process (a server this test
// started) and returns the SIGCONT, also run when t ends.
func stopReplica(t *testing.T, replica *redis.Client) (resume func()) {
	t.Helper()
	pid := redistest.PID(t, replica)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}

// lenOf is the sum of the sizes of a server's keys: it grows with every
// job a batch stores.
func lenOf(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	var n int64
	for _, k := range sizes(t, c) {
		n += k.n
	}
	return n
}

type keySize struct {
	key, typ string
	n        int64
}

// sizes lists a server's keys, sorted, with their types and sizes
// (elements of a list, stream, set, sorted set or hash; 1 for a string).
func sizes(t *testing.T, c *redis.Client) []keySize {
	t.Helper()
	ctx := Context(t, 5*time.Second)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	out := make([]keySize, 0, len(keys))
	for _, k := range keys {
		ks := keySize{key: k, typ: c.Type(ctx, k).Val(), n: 1}
		switch ks.typ {
		case "list":
			ks.n = c.LLen(ctx, k).Val()
		case "stream":
			ks.n = c.XLen(ctx, k).Val()
		case "zset":
			ks.n = c.ZCard(ctx, k).Val()
		case "set":
			ks.n = c.SCard(ctx, k).Val()
		case "hash":
			ks.n = c.HLen(ctx, k).Val()
		}
		out = append(out, ks)
	}
	return out
}

// digest describes a server's data for a comparison: each key, its type
// and its size.
func digest(t *testing.T, c *redis.Client) string {
	t.Helper()
	var b strings.Builder
	for _, k := range sizes(t, c) {
		b.WriteString(k.key + " " + k.typ + " " + strconv.FormatInt(k.n, 10) + "; ")
	}
	return b.String()
}
