package brokertest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// RawStorer is implemented by a driver under test that lets the suite store
// values as they are, as messages of queue ready to be fetched after those
// already there: no validation, no encoding. The suite stores values no
// driver would write, to see what a driver does with a stored message it
// cannot decode (UndecodableDiscarded). A driver's test provides it by
// wrapping the driver in its Factory (a struct embedding it, with a StoreRaw
// method that writes the driver's ready structure), so that the driver's
// own API need not carry it; without it the test is skipped.
type RawStorer interface {
	StoreRaw(ctx context.Context, queue string, values ...[]byte) error
}

// undecodableValues returns stored values Go's decoder refuses, for queue:
// some whose header a Lua pattern would read, one that is no stored message
// at all. Each is named by what is wrong with it.
func undecodableValues(queue string) map[string][]byte {
	good := codec.Encode(NewMessage(queue, 99), 1) // "1,1,0,0,<len(id)>:<id><body>"
	id := NewMessage(queue, 98).ID
	return map[string][]byte{
		"an 11-digit counter":       append([]byte("1,99999999999,"), good[len("1,1,"):]...),
		"an ID length past the end": []byte("1,1,0,0,999:" + id),
		"a body Go cannot read":     fmt.Appendf(nil, "1,1,0,0,%d:%s\xff\xff\xff\xff", len(id), id),
		"no stored message":         []byte("junk, not a stored message"),
	}
}

// testUndecodable proves that a stored message the driver cannot decode is
// moved to the discard key at once, on its first fetch, with a reason that
// is the decode error (it starts with codec.ErrMalformed's text), instead of
// being handed out, held until its lease runs out or discarded later as
// poison; the messages around it are delivered as usual.
func testUndecodable(t *testing.T, e *env) {
	rs, ok := e.d.(RawStorer)
	if !ok {
		t.Skip("the driver under test does not implement brokertest.RawStorer")
	}
	const q = "undecodable"
	before, after := NewMessage(q, 1), NewMessage(q, 2)
	Enqueue(t, e.d, before)
	bad := undecodableValues(q)
	names := slices.Sorted(maps.Keys(bad))
	values := make([][]byte, len(names))
	for i, n := range names {
		values[i] = bad[n]
	}
	if err := rs.StoreRaw(Context(t, 10*time.Second), q, values...); err != nil {
		t.Fatalf("StoreRaw: %v", err)
	}
	Enqueue(t, e.d, after)

	// A lease far longer than the test: a discard that waits for it (or for
	// the poison cap) does not happen here.
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: time.Hour})
	ds := FetchN(t, c, 2, 10, 5*time.Second)
	if got := IDs(ds); !slices.Equal(got, []string{before.ID, after.ID}) {
		t.Fatalf("fetched %v, want only the two decodable messages %v", got, []string{before.ID, after.ID})
	}
	ctx := Context(t, 30*time.Second)
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 4*shortLease)

	recs := discardRecords(t, e, q)
	for i, n := range names {
		j := slices.IndexFunc(recs, func(r codec.Discarded) bool { return bytes.Equal(r.Message, values[i]) })
		if j < 0 {
			t.Errorf("%s: no discard record holds it as stored (%q)", n, values[i])
			continue
		}
		if !strings.HasPrefix(recs[j].Reason, codec.ErrMalformed.Error()) {
			t.Errorf("%s: discard reason %q, want the decode error (%q...)", n, recs[j].Reason, codec.ErrMalformed.Error())
		}
		recs = slices.Delete(recs, j, j+1)
	}
	if len(recs) != 0 {
		t.Errorf("%d more discard records than undecodable values: %+v", len(recs), recs)
	}
	// Nothing is left in flight or ready: only the discard key remains.
	var dead []string
	for _, p := range partitions(e.d, q) {
		dead = append(dead, keys.Queue(e.prefix, p).Part("dead"))
	}
	ks := redistest.Keys(t, Client(t), e.prefix)
	if len(ks) == 0 || slices.ContainsFunc(ks, func(k string) bool { return !slices.Contains(dead, k) }) {
		t.Errorf("keys left: %v, want only the discard key (%v)", ks, dead)
	}
}
