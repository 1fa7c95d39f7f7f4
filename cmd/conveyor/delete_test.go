package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestDelete refuses to delete a queue with jobs in flight (without
// -force) or without -yes when stdin is not a terminal, deleting nothing;
// deletes it whole with -force, as JSON, after which no key of it is left,
// queues no longer lists it and a second delete finds nothing; and deletes
// a queue with nothing in flight without -force, as text, leaving the
// other queues alone.
func TestDelete(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.Enqueue("other", "mail", "o1", nil)
		e.Enqueue("spare", "mail", "s1", nil)
		r := e.fails(1, `queue "work" has 2 jobs in flight`, "delete", "work", "-yes")
		if !strings.Contains(r.errOut, "-force") {
			t.Errorf("the refusal does not say how to go ahead: %q", r.errOut)
		}
		e.fails(2, "pass -yes", "delete", "work", "-force")
		// On a "terminal" that has no answer (/dev/null is a character
		// device), the question says what would go, and nothing goes.
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer devNull.Close()
		var stdout, stderr bytes.Buffer
		code := run(e.ctx, []string{"delete", "work", "-force", "-redis", e.url, "-prefix", e.prefix}, stdio{in: devNull, out: &stdout, err: &stderr})
		if q := `Delete queue "work" and all its keys: 3 ready, 2 in flight, 2 delayed and 2 discarded jobs, its counters and its registry entry?`; code != 2 ||
			!strings.Contains(stderr.String(), q) || !strings.Contains(stderr.String(), "no answer") {
			t.Errorf("delete with stdin %s: exit %d, stderr %q; want 2 after asking %q", os.DevNull, code, stderr.String(), q)
		}
		if s := e.sizes("work"); s.Ready != 3 || s.InFlight != 2 || s.Delayed != 2 || s.Discarded != 2 {
			t.Fatalf("a refused delete changed the queue: %+v", s)
		}

		var got deleteOut
		e.json(&got, "delete", "work", "-force", "-yes")
		want := deleteOut{Queue: "work", Driver: e.driver, Ready: 3, InFlight: 2, Delayed: 2, Discarded: 2, Keys: got.Keys, Registered: true}
		if got != want || got.Keys < 5 {
			t.Errorf("delete -force -json = %+v, want %+v and at least 5 keys", got, want)
		}
		base := keys.Queue(e.prefix, "work").Base()
		for _, k := range redistest.AllKeys(t, e.rdb, e.prefix) {
			if strings.HasPrefix(k, base) {
				t.Errorf("key %s left after the delete", k)
			}
		}
		e.fails(1, `queue "work" not found`, "delete", "work", "-yes")

		r = e.ok("delete", "other", "-yes")
		if !strings.Contains(r.out, `Deleted queue "other": 1 ready, 0 in flight, 0 delayed and 0 discarded jobs;`) {
			t.Errorf("delete says %q", r.out)
		}
		var qs struct{ Queues []queueOut }
		e.json(&qs, "queues")
		if len(qs.Queues) != 1 || qs.Queues[0].Queue != "spare" || qs.Queues[0].Ready != 1 {
			t.Errorf("queues after the deletes = %+v, want spare alone, untouched", qs.Queues)
		}
		e.fails(2, "invalid queue name", "delete", "a{b", "-yes")
		e.fails(2, "missing queue", "delete", "-yes")
	})
}
