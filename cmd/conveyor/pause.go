package main

import (
	"context"
)

var pauseSpec = spec{
	name:     "pause",
	synopsis: "pause <queue> [flags]",
	args:     []string{"queue"},
	about: `Pauses a queue across every worker: within half a second no worker fetches
from it, and jobs a worker fetched ahead are handed back unstarted; jobs
already running finish. The queue still takes enqueues and its timers still
come due. The pause is a key in Redis: it lasts, across restarts of every
process, until resume.

Cost: one SET.`,
}

var resumeSpec = spec{
	name:     "resume",
	synopsis: "resume <queue> [flags]",
	args:     []string{"queue"},
	about: `Lets the workers fetch from a paused queue again, within half a second.
Resuming a queue that is not paused does nothing.

Cost: one DEL.`,
}

func runPause(ctx context.Context, args []string, std stdio) error {
	return setPaused(ctx, &pauseSpec, true, args, std)
}

func runResume(ctx context.Context, args []string, std stdio) error {
	return setPaused(ctx, &resumeSpec, false, args, std)
}

// setPaused pauses or resumes the queue of the command line.
func setPaused(ctx context.Context, s *spec, paused bool, args []string, std stdio) error {
	inv, err := s.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	said := "Resumed queue %q."
	if paused {
		err = insp.Pause(ctx, queue)
		said = "Paused queue %q: workers stop fetching from it within half a second; running jobs finish."
	} else {
		err = insp.Resume(ctx, queue)
	}
	if err != nil {
		return err
	}
	return inv.done(struct {
		Queue  string `json:"queue"`
		Paused bool   `json:"paused"`
	}{queue, paused}, said, queue)
}
