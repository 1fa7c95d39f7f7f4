package broker_test

import (
	"testing"

	"github.com/conveyorq/conveyor/broker"
)

func TestJobStateNames(t *testing.T) {
	t.Parallel()
	for s, name := range map[broker.JobState]string{
		broker.JobReady: "ready", broker.JobInFlight: "in_flight", broker.JobDelayed: "delayed", broker.JobDiscarded: "discarded",
		broker.JobFinished: "finished",
	} {
		if !s.Valid() || s.String() != name {
			t.Errorf("state %d: Valid %v, String %q; want true, %q", int(s), s.Valid(), s.String(), name)
		}
		if got, err := broker.ParseJobState(name); err != nil || got != s {
			t.Errorf("ParseJobState(%q) = %v, %v; want %v", name, got, err, s)
		}
	}
	for _, s := range []broker.JobState{0, 6, -1} {
		if s.Valid() || s.String() == "" {
			t.Errorf("state %d: Valid %v, String %q; want false and a name saying what it is", int(s), s.Valid(), s.String())
		}
	}
	for _, name := range []string{"", "Ready", "inflight", "dead"} {
		if _, err := broker.ParseJobState(name); err == nil {
			t.Errorf("ParseJobState(%q): nil error", name)
		}
	}
}
