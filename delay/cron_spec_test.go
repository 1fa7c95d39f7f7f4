package delay

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustSpec(t *testing.T, spec string, loc *time.Location) *schedule {
	t.Helper()
	s, err := parseSpec(spec, loc)
	if err != nil {
		t.Fatalf("parseSpec(%q): %v", spec, err)
	}
	return s
}

// fireSeq returns the n fires after from, RFC 3339 in the schedule's zone.
func fireSeq(t *testing.T, s *schedule, from time.Time, n int) []string {
	t.Helper()
	var out []string
	at := from
	for range n {
		next, err := s.next(at)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, next.Format(time.RFC3339))
		at = next
	}
	return out
}

// TestScheduleDST pins robfig/cron's answers around the 2026 changes in
// New York, which docs/cron.md states: a fixed time in the skipped hour is
// skipped that day, a fixed time in the repeated hour fires twice, and
// field patterns over hours and minutes follow absolute time.
func TestScheduleDST(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	spring := time.Date(2026, 3, 7, 12, 0, 0, 0, ny)
	fall := time.Date(2026, 10, 31, 12, 0, 0, 0, ny)
	cases := []struct {
		spec string
		from time.Time
		want []string
	}{
		{"30 2 * * *", spring, []string{"2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"}},
		{"0 2 * * *", spring, []string{"2026-03-09T02:00:00-04:00"}},
		{"59 2 * * *", spring, []string{"2026-03-09T02:59:00-04:00"}},
		{"0 3 * * *", spring, []string{"2026-03-08T03:00:00-04:00"}},
		{"30 1 * * *", spring, []string{"2026-03-08T01:30:00-05:00", "2026-03-09T01:30:00-04:00"}},
		{"0 0 * * *", spring, []string{"2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"}},
		{"30 1 * * *", fall, []string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"30 2 * * *", fall, []string{"2026-11-01T02:30:00-05:00", "2026-11-02T02:30:00-05:00"}},
		{"30 0 * * *", fall, []string{"2026-11-01T00:30:00-04:00", "2026-11-02T00:30:00-05:00"}},
		{"*/30 1 * * *", fall, []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00",
			"2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"}},
		{"0 * * * *", time.Date(2026, 3, 8, 0, 30, 0, 0, ny), []string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"}},
		{"0 * * * *", time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []string{"2026-11-01T01:00:00-04:00",
			"2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
	}
	for _, tc := range cases {
		for _, spec := range []string{tc.spec, "CRON_TZ=America/New_York " + tc.spec, "TZ=America/New_York " + tc.spec} {
			loc := ny
			if spec != tc.spec {
				loc = time.UTC // the prefix wins over the configured zone
			}
			got := fireSeq(t, mustSpec(t, spec, loc), tc.from, len(tc.want))
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%q after %s:\n got %v\nwant %v", spec, tc.from.Format(time.RFC3339), got, tc.want)
			}
		}
	}
}

// TestScheduleZone: a spec without a prefix runs in the configured zone.
func TestScheduleZone(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := fireSeq(t, mustSpec(t, "0 9 * * *", time.UTC), from, 1); got[0] != "2026-01-01T09:00:00Z" {
		t.Errorf("UTC: %v", got)
	}
	if got := fireSeq(t, mustSpec(t, "0 9 * * *", tokyo), from, 1); got[0] != "2026-01-02T09:00:00+09:00" {
		t.Errorf("Tokyo: %v", got)
	}
}

// TestScheduleEveryAligned: @every fires at multiples of its period since
// the Unix epoch, whenever it is asked, so instances agree.
func TestScheduleEveryAligned(t *testing.T) {
	t.Parallel()
	s := mustSpec(t, "@every 7m", time.UTC)
	for _, from := range []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 3, 17, 123456789, time.UTC),
		time.Date(2026, 1, 1, 0, 6, 59, 999999999, time.UTC),
	} {
		n, err := s.next(from)
		if err != nil {
			t.Fatal(err)
		}
		if n.Unix()%420 != 0 || !n.After(from) || n.Sub(from) > 7*time.Minute {
			t.Errorf("next after %s = %s: not the next multiple of 7m", from, n)
		}
	}
	// On a fire, the next one is a full period later.
	at := time.Unix(420*4_000_000, 0)
	if n, _ := s.next(at); n.Sub(at) != 7*time.Minute {
		t.Errorf("next after the fire %s = %s", at, n)
	}
}

// TestScheduleLatest checks the bisection against walking fire by fire.
func TestScheduleLatest(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	specs := []struct {
		spec   string
		window time.Duration // how far past the first missed fire now may be
	}{
		{"* * * * * *", time.Hour}, {"*/7 * * * * *", 3 * time.Hour}, {"0 0-1 * * * *", 2 * 24 * time.Hour},
		{"@every 90s", 5 * 24 * time.Hour}, {"0 * * * *", 40 * 24 * time.Hour}, {"30 1 * * *", 400 * 24 * time.Hour},
		{"30 2 * * *", 400 * 24 * time.Hour}, {"0 0 * * 1", 400 * 24 * time.Hour}, {"15 10 1 * *", 900 * 24 * time.Hour},
	}
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 2, 20, 0, 0, 0, 0, ny)
	for _, sp := range specs {
		spec := sp.spec
		s := mustSpec(t, spec, ny)
		for range 20 {
			after := base.Add(time.Duration(r.Int64N(int64(300 * 24 * time.Hour))))
			first, err := s.next(after)
			if err != nil {
				t.Fatal(err)
			}
			now := first.Add(time.Duration(r.Int64N(int64(sp.window))))
			want := first
			for n := 0; ; n++ {
				next, err := s.next(want)
				if err != nil {
					t.Fatal(err)
				}
				if next.After(now) {
					break
				}
				want = next
				if n > 100_000 {
					t.Fatalf("%q: too many fires", spec)
				}
			}
			got, err := s.latest(after, now)
			if err != nil || !got.Equal(want) {
				t.Errorf("%q: latest(%s, %s) = %s, %v; want %s", spec, after, now, got, err, want)
			}
		}
	}
}

// TestCronEntryKeep: the last-fire record lives a week, or three gaps
// between fires when that is longer.
func TestCronEntryKeep(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		spec string
		want time.Duration
	}{
		{"* * * * * *", cronKeepMin},
		{"@daily", cronKeepMin},
		{"@monthly", 3 * 31 * 24 * time.Hour},
		{"@yearly", 3 * 365 * 24 * time.Hour},
	} {
		e := &cronEntry{sched: mustSpec(t, tc.spec, time.UTC)}
		if got := e.keep(at); got != tc.want {
			t.Errorf("%q: keep = %v, want %v", tc.spec, got, tc.want)
		}
	}
}

// TestParseSpecPanics: robfig/cron panics on a zone prefix with nothing
// after it; parseSpec returns an error instead.
func TestParseSpecPanics(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"TZ=", "TZ=UTC", "CRON_TZ=Europe/Paris"} {
		if _, err := parseSpec(spec, time.UTC); err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Errorf("parseSpec(%q) = %v, want the panic as an error", spec, err)
		}
	}
}

// FuzzParseSpec: no spec makes parseSpec or next panic, and a spec that
// parses yields fires that move forward.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"* * * * * *", "*/5 * * * *", "TZ=UTC", "CRON_TZ=America/New_York 30 2 * * *",
		"@every 1h30m", "@daily", "0 0 30 2 *", "1-2-3 * * * *", "5/0 * * * *", "@every ", "TZ= * * * * *"} {
		f.Add(s)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := parseSpec(spec, time.UTC)
		if err != nil {
			return
		}
		n, err := s.next(from)
		if err != nil {
			return
		}
		if !n.After(from) {
			t.Fatalf("%q: next after %s = %s", spec, from, n)
		}
	})
}
