package main

import (
	"strings"
	"testing"
	"time"
)

// TestEnqueue enqueues jobs from flags and from stdin and finds them with
// job, and refuses bad input.
func TestEnqueue(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "mail", "first", nil) // the queue's keys now say its driver
		var m struct {
			ID, Queue, Kind, Driver string
			RunAt                   time.Time `json:"run_at"`
		}
		e.json(&m, "enqueue", "work", "mail.send", "-payload", `{"to":"a@example.com"}`, "-id", "job-1",
			"-header", "trace=abc", "-header", "tenant=t1", "-max-attempts", "5", "-timeout", "30s")
		if m.ID != "job-1" || m.Queue != "work" || m.Kind != "mail.send" || m.Driver != e.driver || !m.RunAt.IsZero() {
			t.Errorf("enqueue -json = %+v", m)
		}
		var j jobOut
		e.json(&j, "job", "work", "job-1")
		if j.State != "ready" || j.Kind != "mail.send" || j.Payload != `{"to":"a@example.com"}` || j.MaxAttempts != 5 || j.TimeoutMS != 30000 ||
			j.Headers["trace"] != "abc" || j.Headers["tenant"] != "t1" {
			t.Errorf("job after enqueue = %+v", j)
		}

		// From stdin, delayed, with a generated ID.
		var in strings.Builder
		in.WriteString("line 1\nline 2\x1b[31m")
		r := e.runIn(in.String(), "enqueue", "work", "report", "-delay", "1h", "-json")
		if r.code != 0 {
			t.Fatalf("enqueue from stdin: exit %d: %s", r.code, r.errOut)
		}
		e.json(&m, "enqueue", "work", "report", "-delay", "1h")
		if m.ID == "" || m.RunAt.IsZero() {
			t.Fatalf("delayed enqueue -json = %+v", m)
		}
		if d := time.Until(m.RunAt); d < 59*time.Minute || d > time.Hour {
			t.Errorf("due in %v, want about 1h", d)
		}
		var p pageOut
		e.json(&p, "jobs", "work", "-state", "delayed")
		if len(p.Jobs) != 2 || p.Jobs[0].Payload != "line 1\nline 2\x1b[31m" {
			t.Fatalf("delayed jobs after enqueue from stdin: %+v", p.Jobs)
		}
		// A person sees the payload's escape sequence escaped.
		r = e.ok("job", "work", p.Jobs[0].ID)
		if strings.Contains(r.out, "\x1b") || !strings.Contains(r.out, `\x1b[31m`) {
			t.Errorf("job shows a raw escape sequence:\n%q", r.out)
		}

		e.json(&m, "enqueue", "work", "report", "-at", "2099-01-02T03:04:05Z", "-id", "at-1")
		if !m.RunAt.Equal(time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("-at: run_at %v", m.RunAt)
		}
		r = e.ok("enqueue", "work", "k", "-unique-key", "u1", "-payload", "")
		if !strings.HasPrefix(r.out, "Enqueued job ") {
			t.Errorf("enqueue says %q", r.out)
		}
		e.fails(1, `unique key "u1"`, "enqueue", "work", "k", "-unique-key", "u1")

		// Grouped: a second job with the ID of a grouped one is refused, and
		// a grouped job cannot be delayed.
		e.ok("enqueue", "work", "k", "-fifo-group", "order:1", "-id", "g-1")
		e.fails(1, `grouped job "g-1"`, "enqueue", "work", "k", "-fifo-group", "order:1", "-id", "g-1")
		e.fails(2, "cannot be delayed", "enqueue", "work", "k", "-fifo-group", "order:1", "-delay", "1m")
		e.fails(2, "-fifo-limit without -fifo-group", "enqueue", "work", "k", "-fifo-limit", "2")

		e.fails(2, "invalid value", "enqueue", "work", "k", "-delay", "soon")
		e.fails(2, `-at "tomorrow"`, "enqueue", "work", "k", "-at", "tomorrow")
		e.fails(2, "-at and -delay", "enqueue", "work", "k", "-at", "2099-01-02T03:04:05Z", "-delay", "1s")
		e.fails(2, "-delay -1s", "enqueue", "work", "k", "-delay", "-1s")
		e.fails(2, "want name=value", "enqueue", "work", "k", "-header", "novalue")
		e.fails(2, "-max-attempts -1", "enqueue", "work", "k", "-max-attempts", "-1")
		e.fails(2, "Kind", "enqueue", "work", "bad kind")
		e.fails(2, "ID", "enqueue", "work", "k", "-id", "bad\x00id")
		e.fails(2, "invalid queue name", "enqueue", "bad queue", "k")
		e.fails(2, "missing kind", "enqueue", "work")
		big := strings.Repeat("x", 1<<20+1)
		if r := e.runIn(big, "enqueue", "work", "k"); r.code != 2 || !strings.Contains(r.errOut, "over the 1048576 byte cap") {
			t.Errorf("enqueue of a payload over 1 MiB: exit %d, %q", r.code, r.errOut)
		}

		// A new queue: its keys cannot say its driver.
		e.fails(2, "pass -driver", "enqueue", "fresh", "k")
		e.json(&m, "enqueue", "fresh", "k", "-driver", e.driver)
		if m.Driver != e.driver {
			t.Errorf("enqueue -driver %s: driver %q", e.driver, m.Driver)
		}
		if s := e.sizes("fresh"); s.Ready != 1 {
			t.Errorf("fresh queue holds %d ready jobs, want 1", s.Ready)
		}
	})
}
