package ulid

import (
	"sort"
	"testing"
	"time"
)

func TestSortableAndUnique(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_700_000_000_000)
	seen := make(map[string]bool)
	var ids []string
	for i := 0; i < 5000; i++ {
		id := New(base.Add(time.Duration(i/10) * time.Millisecond))
		if len(id) != 26 {
			t.Fatalf("len(%q) = %d, want 26", id, len(id))
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	// IDs of later milliseconds sort after earlier ones.
	for i := 10; i < len(ids); i += 10 {
		if ids[i] <= ids[i-10] {
			t.Fatalf("id %q of a later ms sorts before %q", ids[i], ids[i-10])
		}
	}
	if !sort.StringsAreSorted([]string{New(base), New(base.Add(time.Hour))}) {
		t.Fatal("ids an hour apart do not sort by time")
	}
}

func TestEncodeKnownValue(t *testing.T) {
	t.Parallel()
	var b [16]byte
	b[15] = 31
	if got := encode(b); got != "0000000000000000000000000Z" {
		t.Fatalf("encode = %q", got)
	}
	for i := range b {
		b[i] = 0xff
	}
	if got := encode(b); got != "7ZZZZZZZZZZZZZZZZZZZZZZZZZ" {
		t.Fatalf("encode = %q", got)
	}
}
