package list_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// undecodable is a stored value the driver cannot hand out, and the reason
// its discard record must give.
type undecodable struct {
	name, value, reason string
}

// undecodables returns values of queue q that fetch.lua reads as stored
// messages but Go's decoder refuses (their reason is the decode error), and
// values fetch.lua cannot read itself.
func undecodables(t *testing.T) []undecodable {
	t.Helper()
	good := string(codec.Encode(msg("q", "x"), 1))
	out := []undecodable{
		{name: "an 11-digit counter", value: "1,99999999999," + good[len("1,1,"):]},
		{name: "an ID length past the end", value: "1,1,0,0,999:x"},
		{name: "a body Go cannot read", value: "1,1,0,0,1:x\xff\xff\xff"},
	}
	for i := range out {
		_, err := codec.DecodeString(out[i].value, new(broker.Message))
		if err == nil {
			t.Fatalf("%s decodes", out[i].name)
		}
		out[i].reason = err.Error()
	}
	const unreadable = "conveyor: malformed stored message: unreadable header"
	return append(out,
		undecodable{"no stored message", "junk", unreadable},
		undecodable{"letters in the header", "1,a,0,0,1:x", unreadable},
	)
}

// checkDiscarded fails t unless the discard list dead holds one record of
// each value of bad, as stored, with its reason, and nothing else.
func checkDiscarded(t *testing.T, c redis.UniversalClient, dead string, bad []undecodable) {
	t.Helper()
	recs := deadRecords(t, c, dead)
	if len(recs) != len(bad) {
		t.Errorf("dead holds %d records, want %d", len(recs), len(bad))
	}
	for _, u := range bad {
		i := slices.IndexFunc(recs, func(r codec.Discarded) bool { return string(r.Message) == u.value })
		if i < 0 {
			t.Errorf("%s: no discard record holds %q", u.name, u.value)
		} else if recs[i].Reason != u.reason {
			t.Errorf("%s: discard reason %q, want %q", u.name, recs[i].Reason, u.reason)
		}
	}
}

// TestUndecodableDiscardedAtOnce: a stored message the driver cannot decode
// goes to the discard list on its first fetch, with the decode error as its
// reason, and is logged once at Error, whether Go or fetch.lua finds it
// unreadable. It is not leased until its lease runs out, nor counted as
// poison: with the poison cap off it is discarded all the same.
func TestUndecodableDiscardedAtOnce(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	e := newEnv(t, &list.Config{MaxRecoveries: -1, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	bad := undecodables(t)
	e.enqueue(msg("q", "before"))
	for _, u := range bad {
		if err := e.c.LPush(ctx, e.key("q", "ready"), u.value).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(msg("q", "after"))

	// A lease far longer than the test: nothing here waits for one to run
	// out. Fetches of 10 take all the values in one call.
	c := e.open("q", time.Hour)
	var ds []*broker.Delivery
	for len(ds) < 2 {
		ds = append(ds, fetch(t, c, 10)...)
	}
	if got := ids(ds); !slices.Equal(got, []string{"before", "after"}) {
		t.Fatalf("fetched %v, want [before after]", got)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	checkDiscarded(t, e.c, e.key("q", "dead"), bad)
	if ks := redistest.Keys(t, e.c, e.prefix); !slices.Equal(ks, []string{e.key("q", "dead")}) {
		t.Fatalf("keys left: %v, want only the discard list", ks)
	}

	out := logs.String()
	for _, u := range bad[:3] {
		// The ID is logged when Go can read the header.
		var id string
		if h, _, err := codec.ParseHeader([]byte(u.value)); err == nil {
			id = " job_id=" + h.ID
		}
		line := fmt.Sprintf(`level=ERROR msg="list: undecodable message discarded" queue=q%s error=%q`, id, u.reason)
		if strings.Count(out, line) != 1 {
			t.Errorf("%s: want one log line %s in:\n%s", u.name, line, out)
		}
	}
	line := `level=ERROR msg="list: undecodable messages discarded" queue=q count=2 error="conveyor: malformed stored message: unreadable header"`
	if !strings.Contains(out, line) {
		t.Errorf("fetch.lua's discards: want the log line %s in:\n%s", line, out)
	}
	if strings.Contains(out, "poison") {
		t.Errorf("undecodable messages logged as poison:\n%s", out)
	}
}

// TestUndecodableOnMiniredis runs fetch.lua's discard of values it cannot
// read on gopher-lua, and the Go side's discard after it.
func TestUndecodableOnMiniredis(t *testing.T) {
	t.Parallel()
	_, rc, d := onMiniredis(t, nil)
	ctx := context.Background()
	bad := undecodables(t)
	for _, u := range bad {
		if err := rc.LPush(ctx, "conveyor:{q}:ready", u.value).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := leaseOne(t, d)
	if ds := fetch(t, c, 10); len(ds) != 1 || ds[0].ID != "a" {
		t.Fatalf("fetched %v, want [a]", ids(ds))
	}
	checkDiscarded(t, rc, "conveyor:{q}:dead", bad)
	if n, err := rc.ZCard(ctx, "conveyor:{q}:lease").Result(); err != nil || n != 1 {
		t.Fatalf("lease holds %d (%v), want only a's", n, err)
	}
}
