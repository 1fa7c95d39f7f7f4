package conveyor

import (
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// TestHeaderDurations: the per-job header readers take what a job asks
// for, refuse what is malformed or out of range, and cost no allocation
// for a job that asks for nothing (they run for every job a pool settles).
// Not parallel: AllocsPerRun counts every goroutine's allocations.
func TestHeaderDurations(t *testing.T) {
	cases := []struct {
		header string
		v      string
		want   time.Duration
		ok     bool
	}{
		{HeaderRecord, "86400000", 24 * time.Hour, true},
		{HeaderRecord, "0", 0, false},
		{HeaderRecord, "-5", 0, false},
		{HeaderRecord, "soon", 0, false},
		{HeaderRecord, "", 0, false},
		{HeaderVisibilityTimeout, "30000", 30 * time.Second, true},
		{HeaderVisibilityTimeout, "999999999999999", 0, false},
	}
	for _, tc := range cases {
		m := &broker.Message{Headers: map[string]string{tc.header: tc.v}}
		read := RecordOf
		if tc.header == HeaderVisibilityTimeout {
			read = VisibilityTimeoutOf
		}
		if d, ok := read(m); d != tc.want || ok != tc.ok {
			t.Errorf("%s %q: got %v, %v; want %v, %v", tc.header, tc.v, d, ok, tc.want, tc.ok)
		}
	}

	plain := &broker.Message{EnqueuedAt: time.UnixMilli(1_700_000_000_000)}
	if n := testing.AllocsPerRun(100, func() {
		RecordOf(plain)
		VisibilityTimeoutOf(plain)
		ReadyAt(plain)
	}); n != 0 {
		t.Errorf("reading the headers of a job with none: %v allocations, want 0", n)
	}
	due := &broker.Message{EnqueuedAt: plain.EnqueuedAt, Headers: map[string]string{HeaderRunAt: "1700000005000"}}
	if got := ReadyAt(due); !got.Equal(time.UnixMilli(1_700_000_005_000)) {
		t.Errorf("ReadyAt of a job due 5 s after its enqueue = %v", got)
	}
}
