package brokertest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
)

// testDiscard proves a discarded message is never delivered again (not even
// after its lease would have run out) and that the queue's discard key holds
// one record of it, with the reason.
func testDiscard(t *testing.T, e *env) {
	const q = "discard"
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	m := NewMessage(q, 1)
	m.Headers = map[string]string{"trace": "abc"}
	Enqueue(t, e.d, m)
	ctx := Context(t, 30*time.Second)

	d := FetchOne(t, c, 5*time.Second)
	const reason = "bad input: line 1\nline 2 {braces} ünïcode, 1:2"
	before := time.Now()
	if err := c.Discard(ctx, d, reason); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	after := time.Now()
	ExpectNone(t, c, 4*shortLease)
	checkLeaseLost(t, "Ack of a discarded delivery", c.Ack(ctx, d), d, true)

	recs := discardRecords(t, e, q)
	if len(recs) != 1 {
		t.Fatalf("discard key holds %d records, want 1", len(recs))
	}
	rec := recs[0]
	if rec.Reason != reason {
		t.Errorf("discard reason %q, want %q", rec.Reason, reason)
	}
	if rec.At.Before(before.Add(-time.Second)) || rec.At.After(after.Add(time.Second)) {
		t.Errorf("discarded at %v, want between %v and %v", rec.At, before, after)
	}
	var got broker.Message
	if _, err := codec.Decode(rec.Message, &got); err != nil {
		t.Fatalf("discarded message does not decode: %v", err)
	}
	checkSameMessage(t, &got, m)
}

// discardRecords reads every record of queue's discard key,
// <prefix>:{<queue>}:dead (of each partition, for a Partitioned driver),
// whatever Redis type the driver keeps it in.
func discardRecords(t *testing.T, e *env, queue string) []codec.Discarded {
	t.Helper()
	var out []codec.Discarded
	for _, p := range partitions(e.d, queue) {
		out = append(out, discardKeyRecords(t, e.prefix, p)...)
	}
	return out
}

// discardKeyRecords reads the records of queue's discard key.
func discardKeyRecords(t *testing.T, prefix, queue string) []codec.Discarded {
	t.Helper()
	rdb := Client(t)
	ctx := Context(t, 10*time.Second)
	key := keys.Queue(prefix, queue).Part("dead")
	typ, err := rdb.Type(ctx, key).Result()
	if err != nil {
		t.Fatalf("TYPE %s: %v", key, err)
	}
	var raw []string
	switch typ {
	case "none":
	case "list":
		raw, err = rdb.LRange(ctx, key, 0, -1).Result()
	case "zset":
		raw, err = rdb.ZRange(ctx, key, 0, -1).Result()
	case "set":
		raw, err = rdb.SMembers(ctx, key).Result()
	case "hash":
		raw, err = rdb.HVals(ctx, key).Result()
	case "stream":
		var xs []redis.XMessage
		xs, err = rdb.XRange(ctx, key, "-", "+").Result()
		// One record per entry: the entry's value that decodes.
		for _, x := range xs {
			rec := ""
			for _, v := range x.Values {
				if s, ok := v.(string); ok {
					if _, derr := codec.DecodeDiscarded([]byte(s)); derr == nil {
						rec = s
					}
				}
			}
			raw = append(raw, rec)
		}
	default:
		t.Fatalf("discard key %s has type %s, want list, zset, set, hash or stream", key, typ)
	}
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	out := make([]codec.Discarded, 0, len(raw))
	for _, r := range raw {
		rec, err := codec.DecodeDiscarded([]byte(r))
		if err != nil {
			t.Fatalf("discard record %q: %v", r, err)
		}
		out = append(out, rec)
	}
	return out
}
