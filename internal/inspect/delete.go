package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
)

// Deleter deletes a queue of a durable driver (broker.QueueDeleter), in
// this order, each step safe to repeat:
//
//  1. the first SCAN page of the queue's keys (a read: a user whose ACL
//     refuses SCAN learns it before anything is deleted);
//  2. the driver's delete script (Script, with Call's KEYS: every key of
//     the queue whose name the driver knows), which counts the jobs of
//     each state and, unless jobs are in flight and the delete is not
//     forced, DELs every one of those keys, atomically;
//  3. the keys whose names hold data (unique keys, cron records, the
//     waits' own keys), found by SCAN ... MATCH <prefix>:{<queue>}:*,
//     COUNT 1000 a page, on the node that holds the queue's slot, and
//     DELed a page at a time. A key the script deleted that exists again
//     was made meanwhile by a process still using the queue; it is left
//     alone, as the script alone decides, atomically, about the jobs in
//     flight;
//  4. the queue's name in the registry (SREM), last, so that a delete cut
//     short leaves the queue listed, to be deleted again.
type Deleter struct {
	// Name starts every error ("list", "stream").
	Name string
	// Client is the driver's Redis client.
	Client redis.UniversalClient
	// Prefix is the driver's key prefix.
	Prefix string
	// Script is the driver's delete script: KEYS as Call returns them,
	// ARGV[1] "1" to force the delete, then Call's arguments; reply
	// {deleted (1) or refused (0), ready, in flight, delayed, discarded,
	// keys deleted}.
	Script *script.Script
	// Call returns Script's KEYS, every key of queue whose name the driver
	// knows, and its ARGV after the force flag.
	Call func(queue string) (keys []string, args []any)
	// Forget makes the driver register queue again on its next enqueue or
	// Open (registry.Registry.Forget).
	Forget func(queue string)
}

// scanCount is the COUNT of each SCAN of a delete: the keys Redis looks at
// per call, whatever the pattern.
const scanCount = 1000

// DeleteQueue deletes queue (see Deleter), and its name in the registry.
func (x *Deleter) DeleteQueue(ctx context.Context, queue string, force bool) (broker.QueueDeletion, error) {
	op := x.Name + ": delete queue"
	out := broker.QueueDeletion{Queue: queue}
	if err := checkQueue(op, queue); err != nil {
		return out, err
	}
	base := keys.Queue(x.Prefix, queue).Base()
	node, err := x.scanNode(ctx, base)
	if err != nil {
		return out, fmt.Errorf("%s %q: %w", op, queue, err)
	}
	pattern := escapeGlob(base) + "*"
	page, cursor, err := node.Scan(ctx, 0, pattern, scanCount).Result()
	if err != nil {
		return out, fmt.Errorf("%s %q: scan its keys (an ACL user needs +scan to delete queues): %w", op, queue, err)
	}

	known, args := x.Call(queue)
	flag := "0"
	if force {
		flag = "1"
	}
	v, err := x.Script.Run(ctx, x.Client, known, append([]any{flag}, args...)...)
	if err != nil {
		return out, fmt.Errorf("%s %q: %w", op, queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 6 {
		return out, fmt.Errorf("%s %q: unexpected reply %v", op, queue, v)
	}
	n := make([]int64, len(r))
	for i := range r {
		n[i], _ = r[i].(int64)
	}
	if n[0] != 1 {
		return out, fmt.Errorf("%s: %w", op, &broker.InFlightError{Queue: queue, InFlight: n[2]})
	}
	out.Ready, out.InFlight, out.Delayed, out.Discarded, out.Keys = n[1], n[2], n[3], n[4], n[5]

	for step := 0; ; step++ {
		others := slices.DeleteFunc(page, func(k string) bool { return !strings.HasPrefix(k, base) || slices.Contains(known, k) })
		if len(others) > 0 {
			// One slot (the queue's hash tag): one DEL, on any deployment.
			d, err := x.Client.Del(ctx, others...).Result()
			out.Keys += d
			if err != nil {
				return out, fmt.Errorf("%s %q: delete its keys: %w", op, queue, err)
			}
		}
		if cursor == 0 {
			break
		}
		if step == MaxSteps {
			return out, fmt.Errorf("%s %q: scan of its keys did not end after %d steps", op, queue, MaxSteps)
		}
		if page, cursor, err = node.Scan(ctx, cursor, pattern, scanCount).Result(); err != nil {
			return out, fmt.Errorf("%s %q: scan its keys: %w", op, queue, err)
		}
	}

	if out.Registered, err = registry.Remove(ctx, x.Client, x.Prefix, queue); err != nil {
		return out, fmt.Errorf("%s: %w", op, err)
	}
	if x.Forget != nil {
		x.Forget(queue)
	}
	return out, nil
}

// scanNode returns where to SCAN for the keys starting with base: the
// client, or on a Cluster the master that holds base's slot (a SCAN goes to
// one node, and all of a queue's keys are in one slot).
func (x *Deleter) scanNode(ctx context.Context, base string) (redis.Cmdable, error) {
	cc, ok := x.Client.(*redis.ClusterClient)
	if !ok {
		return x.Client, nil
	}
	n, err := cc.MasterForKey(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("find the node of its slot: %w", err)
	}
	if n == nil {
		return nil, errors.New("find the node of its slot: none")
	}
	return n, nil
}

// escapeGlob escapes the characters SCAN's MATCH reads as a pattern
// (queue names and prefixes may hold them), so the pattern matches s
// itself.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
