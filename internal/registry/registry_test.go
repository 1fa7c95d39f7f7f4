package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// done returns the command of an SADD that succeeded (or failed with err).
func done(err error) *redis.IntCmd {
	cmd := redis.NewIntCmd(context.Background(), "sadd")
	if err != nil {
		cmd.SetErr(err)
	}
	return cmd
}

func TestPendingAndDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs bytes.Buffer
	r := New("p", "list", slog.New(slog.NewTextHandler(&logs, nil)))
	a := r.Pending("a", "b", "a")
	if a == nil || !slices.Equal(a.names, []string{"a", "b"}) {
		t.Fatalf("Pending of a new registry = %+v, want [a b], each once", a)
	}
	if a.Done(ctx) {
		t.Fatal("Done of an SADD never queued: true")
	}
	a.cmd = done(errors.New("refused"))
	if a.Done(ctx) {
		t.Fatal("Done of a failed SADD: true")
	}
	if got := logs.String(); !strings.Contains(got, "list: could not add queues to the registry") || !strings.Contains(got, "refused") {
		t.Fatalf("a failed SADD logged %q, want the driver's warning with the error", got)
	}
	if got := r.Pending("a"); got != nil {
		t.Fatalf("right after a failed SADD Pending = %+v, want nil (paused)", got)
	}
	r.pausedUntil.Store(time.Now().Add(-time.Second).UnixNano()) // the pause is over
	if got := r.Pending("a"); got == nil || !slices.Equal(got.names, []string{"a"}) {
		t.Fatalf("after the pause Pending = %+v, want a again", got)
	}
	a.cmd = done(nil)
	if !a.Done(ctx) {
		t.Fatal("Done of a good SADD: false")
	}
	if got := r.Pending("a", "b"); got != nil {
		t.Fatalf("after a good SADD Pending = %+v, want nil", got)
	}
	if got := r.Pending("b", "c"); got == nil || !slices.Equal(got.names, []string{"c"}) {
		t.Fatalf("Pending(b, c) = %+v, want [c]", got)
	}
}

// A nil *Pending (nothing to add) sends and records nothing.
func TestNilPending(t *testing.T) {
	t.Parallel()
	var a *Pending
	a.Add(context.Background(), nil) // must not touch the (nil) pipeline
	if also := a.Also(context.Background()); also != nil {
		t.Fatalf("Also of nil = %d funcs, want none", len(also))
	}
	if !a.Done(context.Background()) {
		t.Fatal("Done of nil: false, want true")
	}
}

// Past maxRemembered names a registry stops remembering: the others are
// added every time (correct, only dearer), and memory stays bounded.
func TestRememberedIsCapped(t *testing.T) {
	t.Parallel()
	r := New("p", "list", slog.New(slog.DiscardHandler))
	names := make([]string, maxRemembered+10)
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
	}
	if err := r.done(done(nil), names); err != nil {
		t.Fatal(err)
	}
	if n := r.n.Load(); n != maxRemembered {
		t.Fatalf("remembered %d names, want the cap %d", n, maxRemembered)
	}
	if got := r.Pending(names...); got == nil || len(got.names) != 10 {
		t.Fatalf("Pending after the cap = %+v, want the 10 names past it", got)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	if k := Key("conveyor"); k != "conveyor:queues" {
		t.Fatalf("Key = %q", k)
	}
}
