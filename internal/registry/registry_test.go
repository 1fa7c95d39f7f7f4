package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

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

func TestMissingAndDone(t *testing.T) {
	t.Parallel()
	r := New("p")
	if got := r.Missing("a", "b", "a"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Missing of a new registry = %q, want [a b], each once", got)
	}
	if err := r.Done(done(errors.New("refused")), []string{"a", "b"}); err == nil {
		t.Fatal("Done of a failed SADD: nil error")
	}
	if got := r.Missing("a"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a failed SADD Missing = %q, want a again", got)
	}
	if err := r.Done(done(nil), []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if got := r.Missing("a", "b"); got != nil {
		t.Fatalf("after a good SADD Missing = %q, want nil", got)
	}
	if got := r.Missing("b", "c"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Missing(b, c) = %q, want [c]", got)
	}
}

// Past maxRemembered names a registry stops remembering: the others are
// added every time (correct, only dearer), and memory stays bounded.
func TestRememberedIsCapped(t *testing.T) {
	t.Parallel()
	r := New("p")
	names := make([]string, maxRemembered+10)
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
	}
	if err := r.Done(done(nil), names); err != nil {
		t.Fatal(err)
	}
	if n := r.n.Load(); n != maxRemembered {
		t.Fatalf("remembered %d names, want the cap %d", n, maxRemembered)
	}
	if got := r.Missing(names...); len(got) != 10 {
		t.Fatalf("Missing after the cap = %d names, want the 10 past it", len(got))
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	if k := Key("conveyor"); k != "conveyor:queues" {
		t.Fatalf("Key = %q", k)
	}
}
