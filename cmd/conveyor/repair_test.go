package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor"
)

// TestRedrive re-drives discarded jobs by kind, then all, and refuses
// without -yes when stdin is not a terminal.
func TestRedrive(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		r := e.fails(2, "pass -yes", "redrive", "work")
		if !strings.Contains(r.errOut, "stdin is not a terminal") {
			t.Errorf("refusal does not say why: %q", r.errOut)
		}
		if s := e.sizes("work"); s.Discarded != 2 || s.Ready != 3 {
			t.Fatalf("a refused redrive moved jobs: discarded %d, ready %d", s.Discarded, s.Ready)
		}
		var got struct {
			Queue    string
			Redriven int
		}
		e.json(&got, "redrive", "work", "-kind", "sms", "-yes")
		if got.Queue != "work" || got.Redriven != 1 {
			t.Errorf("redrive -kind sms = %+v, want 1 re-driven", got)
		}
		if s := e.sizes("work"); s.Discarded != 1 || s.Ready != 4 {
			t.Errorf("after redrive -kind sms: discarded %d, ready %d; want 1, 4", s.Discarded, s.Ready)
		}
		var j jobOut
		e.json(&j, "job", "work", "d2")
		if j.State != "ready" || j.Attempt != 1 {
			t.Errorf("re-driven d2: %+v", j)
		}
		r = e.ok("redrive", "work", "-yes")
		if !strings.Contains(r.out, `Re-drove 1 jobs of queue "work".`) {
			t.Errorf("redrive says %q", r.out)
		}
		if s := e.sizes("work"); s.Discarded != 0 || s.Ready != 5 {
			t.Errorf("after redrive: discarded %d, ready %d; want 0, 5", s.Discarded, s.Ready)
		}
		e.json(&got, "redrive", "work", "-yes")
		if got.Redriven != 0 {
			t.Errorf("redrive of an empty discard queue = %d", got.Redriven)
		}
		e.fails(2, "-max -1", "redrive", "work", "-max", "-1", "-yes")
		e.fails(1, "not found", "redrive", "nosuch", "-yes")
	})
}

// TestPurge purges each state that can be, in steps past the first
// thousand with plain progress lines (stderr is no terminal), up to -max.
func TestPurge(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.fails(2, "pass -yes", "purge", "work", "-state", "delayed")
		if s := e.sizes("work"); s.Delayed != 2 {
			t.Fatalf("a refused purge deleted timers: %d left", s.Delayed)
		}
		var got struct {
			Queue, State string
			Purged       int
		}
		e.json(&got, "purge", "work", "-state", "delayed", "-yes")
		if got.Purged != 2 || got.State != "delayed" {
			t.Errorf("purge delayed = %+v, want 2", got)
		}
		e.json(&got, "purge", "work", "-state", "discarded", "-max", "1", "-yes")
		if got.Purged != 1 {
			t.Errorf("purge discarded -max 1 = %d", got.Purged)
		}
		e.fails(2, "in-flight jobs cannot be purged", "purge", "work", "-state", "in-flight", "-yes")
		e.fails(2, "-state is required", "purge", "work", "-yes")
		if s := e.sizes("work"); s.Delayed != 0 || s.Discarded != 1 || s.InFlight != 2 || s.Ready != 3 {
			t.Errorf("after the purges: %+v", s)
		}

		// 2,500 more ready jobs: a purge of -max 1,200 takes two steps,
		// the rest three.
		reqs := make([]conveyor.Request, 2500)
		for k := range reqs {
			reqs[k] = conveyor.Request{Kind: "bulk", Opts: &conveyor.EnqueueOptions{Queue: "work", ID: fmt.Sprintf("b%d", k)}}
		}
		if _, err := e.client.EnqueueMany(e.ctx, reqs...); err != nil {
			t.Fatal(err)
		}
		r := e.ok("purge", "work", "-state", "ready", "-max", "1200", "-yes")
		if !strings.Contains(r.out, `Purged 1200 ready jobs of queue "work".`) {
			t.Errorf("purge -max 1200 says %q", r.out)
		}
		if s := e.sizes("work"); s.Ready != 2503-1200 {
			t.Errorf("after purge -max 1200: %d ready, want %d", s.Ready, 2503-1200)
		}
		r = e.ok("purge", "work", "-state", "ready", "-yes")
		if !strings.Contains(r.out, "Purged 1303 ready jobs") {
			t.Errorf("purge says %q", r.out)
		}
		if strings.Contains(r.errOut, "\r") || !strings.HasSuffix(r.errOut, "purged 1303\n") || !strings.HasPrefix(r.errOut, "purged 1000 of at most 1303\n") {
			t.Errorf("progress on a stderr that is no terminal = %q, want plain lines", r.errOut)
		}
		if s := e.sizes("work"); s.Ready != 0 || s.InFlight != 2 {
			t.Errorf("after purging ready: %d ready, %d in flight; want 0, 2", s.Ready, s.InFlight)
		}
	})
}

// TestCancelJob cancels a ready and a delayed job with -job, after which
// they are gone, and says so for an ID no state holds.
func TestCancelJob(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.fails(2, "pass -yes", "cancel", "work", "r2", "-job")
		var got struct {
			Queue, ID, State string
			Cancelled        bool
		}
		e.json(&got, "cancel", "work", "r2", "-job", "-yes")
		if !got.Cancelled || got.ID != "r2" || got.State != "ready" {
			t.Errorf("cancel -job -json = %+v", got)
		}
		e.fails(1, `job "r2" not found`, "job", "work", "r2")
		r := e.ok("cancel", "work", "t2", "-job", "-yes")
		if !strings.Contains(r.out, `Cancelled the delayed job "t2" of queue "work".`) {
			t.Errorf("cancel -job says %q", r.out)
		}
		e.fails(1, `job "t2" not found in queue "work"`, "cancel", "work", "t2", "-job", "-yes")
		e.fails(1, `job "d1" not found in queue "work"`, "cancel", "work", "d1", "-job", "-yes") // discarded: nothing to stop
		if s := e.sizes("work"); s.Ready != 2 || s.Delayed != 1 {
			t.Errorf("after the cancels: %d ready, %d delayed; want 2, 1", s.Ready, s.Delayed)
		}
	})
}

// TestCancel cancels a timer, after which it is gone, and refuses without
// -yes and for a timer that is not pending.
func TestCancel(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.fails(2, "pass -yes", "cancel", "work", "t1")
		var j jobOut
		e.json(&j, "job", "work", "t1")
		if j.State != "delayed" {
			t.Fatalf("after a refused cancel t1 is %q", j.State)
		}
		var got struct {
			Queue, ID string
			Cancelled bool
		}
		e.json(&got, "cancel", "work", "t1", "-yes")
		if !got.Cancelled || got.ID != "t1" {
			t.Errorf("cancel -json = %+v", got)
		}
		e.fails(1, `job "t1" not found`, "job", "work", "t1")
		e.fails(1, `timer "t1" not found in queue "work"`, "cancel", "work", "t1", "-yes")
		e.fails(1, `timer "r1" not found`, "cancel", "work", "r1", "-yes")
		r := e.ok("cancel", "work", "t2", "-yes")
		if !strings.Contains(r.out, `Cancelled timer "t2" of queue "work".`) {
			t.Errorf("cancel says %q", r.out)
		}
		if s := e.sizes("work"); s.Delayed != 0 || s.Ready != 3 {
			t.Errorf("after the cancels: delayed %d, ready %d; want 0, 3", s.Delayed, s.Ready)
		}
	})
}
