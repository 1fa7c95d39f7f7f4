package benchkit

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestPercentileNearestRank(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.9: 90, 0.99: 99, 1: 100, 0.001: 1, 0.505: 51} {
		if got := Percentile(s, q); got != want {
			t.Errorf("Percentile(1..100, %v) = %d, want %d", q, got, want)
		}
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %d, want 0", got)
	}
	if got := Percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("Percentile([7], 0.99) = %d, want 7", got)
	}
}

func TestSummarise(t *testing.T) {
	t.Parallel()
	d := Summarise([]time.Duration{5, -2, 3, -1, 4, 1, 2, 6, 7, 8})
	want := Distribution{N: 10, P50: 3, P90: 7, P99: 8, Min: -2, Max: 8, Negative: 2}
	if d != want {
		t.Errorf("Summarise = %+v, want %+v", d, want)
	}
	if z := Summarise(nil); z != (Distribution{}) {
		t.Errorf("Summarise(nil) = %+v, want zero", z)
	}
}

func TestStampRoundTrip(t *testing.T) {
	t.Parallel()
	e := &Env{Cfg: Config{Payload: 100}, base: time.Now().Add(-time.Hour)}
	at := e.base.Add(90 * time.Minute)
	p := e.payload(e.stamp(at))
	if len(p) != 100 {
		t.Fatalf("payload of %d bytes, want 100", len(p))
	}
	if got := e.sinceStamp(at.Add(3*time.Millisecond), getStamp(p)); got != 3*time.Millisecond {
		t.Errorf("sinceStamp = %s, want 3ms", got)
	}
	if got := e.sinceStamp(at.Add(-time.Millisecond), getStamp(p)); got != -time.Millisecond {
		t.Errorf("sinceStamp before the stamp = %s, want -1ms (an early timer)", got)
	}
	if e.stamp(e.base) == 0 {
		t.Error("stamp of the base time is 0, the warm-up marker")
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	c, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.N != 100_000 || c.Payload != 100 || c.Concurrency != 50 || c.Batch != 100 || c.Rate != 2000 || c.Idle != 5*time.Second {
		t.Errorf("defaults = %+v", c)
	}
	for name, bad := range map[string]Config{
		"payload": {Payload: 7},
		"n":       {N: -1},
		"batch":   {Batch: 10_001},
		"rate":    {Rate: -5},
		"window":  {Window: -time.Second},
		"idle":    {Idle: time.Millisecond},
	} {
		if _, err := bad.WithDefaults(); err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%+v: err %v, want one naming %s", bad, err, name)
		}
	}
}

func TestFormatValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567.4, "jobs/s", "1,234,567"},
		{999, "bytes", "999"},
		{-1234, "bytes", "-1,234"},
		{0.1234, "ms", "0.12"},
		{0.91234, "ratio", "0.912"},
		{4.25, "cmd/s", "4.2"},
	} {
		if got := FormatValue(c.v, c.unit); got != c.want {
			t.Errorf("FormatValue(%v, %s) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func TestGoalsAndTable(t *testing.T) {
	t.Parallel()
	cfg, _ := Config{}.WithDefaults()
	list := goals("e2e", "list", cfg, []Metric{{Name: "processed", Value: 160_000, Unit: "jobs/s"}})
	stream := goals("memory", "stream", cfg, []Metric{{Name: "per pending job", Value: 171, Unit: "bytes"}})
	peer := goals("memory", "asynq", cfg, []Metric{{Name: "per pending job", Value: 644, Unit: "bytes"}})
	if m := list[0]; m.Met == nil || !*m.Met || m.Goal != ">= 150,000" {
		t.Errorf("list e2e goal = %q met %v, want >= 150,000 met", m.Goal, m.Met)
	}
	if m := stream[0]; m.Met == nil || *m.Met || m.Goal != "<= 160" {
		t.Errorf("stream memory goal = %q met %v, want <= 160 missed", m.Goal, m.Met)
	}
	if m := peer[0]; m.Met != nil || m.Goal != "" {
		t.Errorf("asynq has a goal %q", m.Goal)
	}
	small := cfg
	small.N = 200
	if m := goals("e2e", "list", small, []Metric{{Name: "processed", Value: 1, Unit: "jobs/s"}})[0]; m.Met != nil {
		t.Error("the e2e goal applies to 200 jobs; it is set for 100,000")
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, []Result{
		{Workload: "e2e", System: "list", Metrics: list},
		{Workload: "memory", System: "stream", Metrics: stream},
	}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want a header and 2 rows:\n%s", len(lines), buf.String())
	}
	for i, want := range [][]string{
		{"WORKLOAD", "SYSTEM", "FIGURE", "VALUE", "UNIT", "GOAL"},
		{"e2e", "list", "processed", "160,000", "jobs/s", ">=", "150,000", "(met)"},
		{"memory", "stream", "per", "pending", "job", "171", "bytes", "<=", "160", "(MISSED)"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], want)
		}
	}
}

func TestInfoField(t *testing.T) {
	t.Parallel()
	info := "# Memory\r\nused_memory:123456\r\nused_memory_human:120.56K\r\nused_memory_rss:999\r\n"
	if n, err := infoField(info, "used_memory"); err != nil || n != 123456 {
		t.Errorf("used_memory = %d, %v; want 123456", n, err)
	}
	if _, err := infoField(info, "missing"); err == nil {
		t.Error("a missing field gave no error")
	}
}

func TestTally(t *testing.T) {
	t.Parallel()
	var tl tally
	three := tl.reached(3)
	tl.add()
	tl.add()
	select {
	case <-three:
		t.Fatal("reached(3) closed at 2")
	default:
	}
	tl.add()
	select {
	case <-three:
	case <-time.After(5 * time.Second):
		t.Fatal("reached(3) not closed at 3")
	}
	select {
	case <-tl.reached(2):
	default:
		t.Fatal("reached(2) after 3 is not closed at once")
	}
}

func TestNewEnvRefusesAUsedPrefix(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, prefix+":someone-else", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	if e, err := NewEnv(ctx, opts, prefix, Config{}, nil); err == nil {
		_ = e.Redis.Close()
		t.Fatal("NewEnv took a prefix that has keys")
	}
	if n, err := rdb.Exists(ctx, prefix+":someone-else").Result(); err != nil || n != 1 {
		t.Errorf("the existing key is gone (exists %d, err %v)", n, err)
	}
}
