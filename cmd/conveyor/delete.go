package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/conveyorq/conveyor"
)

var deleteSpec = spec{
	name:     "delete",
	synopsis: "delete <queue> [-force] [-yes] [flags]",
	args:     []string{"queue"},
	about: `Deletes a queue and every key it has: its ready, in-flight, delayed and
discarded jobs, its processed and failed counters, its pause, its unique
keys, its cron series' records and its keeper election, then its name in
the queue registry (queues no longer lists it). It refuses while jobs of
the queue are in flight (workers hold them under leases), deleting nothing,
unless -force: those workers then lose their leases (a pool cancels the
handlers at its next heartbeat) and the jobs are gone.

Stop the queue's workers and producers first. A worker still running on it
goes on: it finds the queue empty, and a job enqueued afterwards makes the
queue anew. It asks for confirmation on a terminal, saying how many jobs of
each state it deletes; without one it needs -yes.

Cost: one script call that counts the jobs and deletes the queue's keys,
which frees every job at once (O(jobs)); a SCAN of the database for the
keys whose names hold data (unique keys, cron records): one round trip per
1,000 keys in the database, however small the queue; then one SREM.`,
}

// deleteOut is the JSON output of delete.
type deleteOut struct {
	Queue      string `json:"queue"`
	Driver     string `json:"driver"`
	Ready      int64  `json:"ready"`
	InFlight   int64  `json:"in_flight"`
	Delayed    int64  `json:"delayed"`
	Discarded  int64  `json:"discarded"`
	Keys       int64  `json:"keys"`
	Registered bool   `json:"registered"`
}

func runDelete(ctx context.Context, args []string, std stdio) error {
	var yes, force bool
	s := deleteSpec
	s.flags = func(fs *flag.FlagSet) {
		fs.BoolVar(&yes, "yes", false, "do it without asking (needed when stdin is not a terminal)")
		fs.BoolVar(&force, "force", false, "delete the queue even while workers hold jobs of it in flight (the jobs are lost)")
	}
	inv, err := s.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	sizes, err := insp.Queue(ctx, queue)
	if err != nil {
		return err
	}
	if sizes.InFlight > 0 && !force {
		return inFlight(queue, sizes.InFlight)
	}
	q := fmt.Sprintf("Delete queue %q and all its keys: %s, its counters and its registry entry? It cannot be undone.",
		queue, jobCounts(sizes.Ready, sizes.InFlight, sizes.Delayed, sizes.Discarded))
	if err := inv.confirm(yes, q); err != nil {
		return err
	}
	res, err := insp.DeleteQueue(ctx, queue, &conveyor.DeleteQueueOptions{Force: force})
	var ife *conveyor.InFlightError
	if errors.As(err, &ife) {
		return inFlight(queue, ife.InFlight) // some came into flight since the look above
	}
	if err != nil {
		if res != nil && (res.Keys > 0 || res.Jobs() > 0) {
			return fmt.Errorf("%w (it had deleted %d keys; run the command again to finish)", err, res.Keys)
		}
		return err
	}
	return inv.done(deleteOut{
		Queue: queue, Driver: inv.probe.Driver, Ready: res.Ready, InFlight: res.InFlight, Delayed: res.Delayed,
		Discarded: res.Discarded, Keys: res.Keys, Registered: res.Registered,
	}, "Deleted queue %q: %s; %d keys.", queue, jobCounts(res.Ready, res.InFlight, res.Delayed, res.Discarded), res.Keys)
}

// inFlight is delete's refusal of a queue with n jobs in flight.
func inFlight(queue string, n int64) error {
	return fmt.Errorf("queue %q has %d jobs in flight, leased to workers: nothing deleted; "+
		"stop its workers or wait for the jobs to settle, or pass -force to delete them too", queue, n)
}

// jobCounts writes the jobs of each state.
func jobCounts(ready, inFlight, delayed, discarded int64) string {
	return fmt.Sprintf("%d ready, %d in flight, %d delayed and %d discarded jobs", ready, inFlight, delayed, discarded)
}
