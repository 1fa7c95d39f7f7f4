package brokertest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
)

// mutantEnv names the mutant the in-memory driver plays in a child process.
const mutantEnv = "BROKERTEST_MUTANT"

// TestMemDriver runs the suite on the in-memory reference driver: a correct
// driver with every capability passes every test, so a failure here is a
// bug in the suite.
func TestMemDriver(t *testing.T) {
	mutant := os.Getenv(mutantEnv)
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		return newMemDriver(brokertest.Client(t), prefix, mutant)
	})
}

// TestMutantsFail proves the suite's assertions can fail: each mutant of the
// reference driver breaks one promise, and the test guarding that promise
// must fail on it. Each runs in a child process of this test binary.
func TestMutantsFail(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("in a mutant child")
	}
	if testing.Short() {
		t.Skip("-short: the mutants take about 20s")
	}
	for _, tc := range []struct{ mutant, test string }{
		{"dropheaders", "RoundTrip"},
		{"onlyone", "Batch"},
		{"duplicate", "Batch"},
		{"lifo", "FIFO"},
		{"noexpiry", "RedeliveryAfterLeaseExpiry"},
		{"sametoken", "RedeliveryAfterLeaseExpiry"},
		{"nofence", "StaleAckRefused"},
		{"sametoken", "StaleAckRefused"},
		{"extendnoop", "ExtendKeepsLease"},
		{"deafcancel", "FetchCancel"},
		{"polling", "FetchWakes"},
		{"noidle", "FetchIdle"},
		{"closenoop", "FetchAfterClose"},
		{"duplicate", "ExclusiveDelivery"},
		{"retrykeepsattempt", "Retry"},
		{"ignorerunat", "Retry"},
		{"releasecounts", "Release"},
		{"discardkeeps", "Discard"},
		{"nopoison", "PoisonDiscarded"},
		{"nolastchance", "RecoveredInBatches"},
		{"undecodableheld", "UndecodableDiscarded"},
		{"listoldestfirst", "DiscardsInspect"},
		{"redrivekeepsattempt", "DiscardsRedriveOne"},
		{"redrivekeepsrecord", "DiscardsRedriveOne"},
		{"redriveignoreskind", "DiscardsRedriveFilter"},
		{"purgeignoresid", "DiscardsPurge"},
		{"nocountcap", "DiscardsCountRetention"},
		{"getfirstpage", "DiscardsCountRetention"},
		{"noage", "DiscardsAgeRetention"},
		{"agecountedascap", "DiscardsAgeRetention"},
		{"onepage", "DiscardsBounded"},
		{"ignorerunat", "DelayedEnqueue"},
		{"ignorerunat", "Postpone"},
		{"postponecounts", "Postpone"},
		{"uniqueignored", "UniqueKey"},
		{"cancelalwaystrue", "TimerCancel"},
		{"cancelkeeps", "TimerCancel"},
		{"promotetwice", "TimerCancelAfterPromotion"},
		{"reschedulenoop", "TimerReschedule"},
		{"duplicateoverwrites", "TimerDuplicateID"},
		{"pendingunsorted", "TimerPendingPages"},
		{"promotetwice", "TimerPromoteOnce"},
		{"promoteearly", "TimerNeverEarly"},
		{"retryoverwrites", "TimerRetryClash"},
		{"nowake", "TimerWake"},
		{"fireignoreslast", "CronFireOnce"},
		{"seriesreversed", "CronSeries"},
		{"serieskeepsexpired", "CronSeries"},
		{"fireignoreslast", "CronSeries"},
		{"noregistry", "InspectQueues"},
		{"sizesnoinflight", "InspectSizes"},
		{"nocounters", "InspectSizes"},
		{"postponefails", "InspectSizes"},
		{"readylifo", "InspectListJobs"},
		{"findfirstpage", "InspectFindJob"},
		{"purgenewest", "InspectPurge"},
		{"novalidate", "InspectHostileQueueNames"},
		{"deleteinflight", "DeleteQueue"},
		{"deletekeepsdiscards", "DeleteQueue"},
		{"deletekeepsregistry", "DeleteQueue"},
		{"nodelaycap", "UnsupportedOperations"},
		{"leakkey", "NoKeysLeft"},
		{"novalidate", "HostileQueueNames"},
		{"partialbatch", "InvalidMessages"},
		{"checkfails", "Check"},
	} {
		t.Run(tc.mutant+"/"+tc.test, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMemDriver$/^"+tc.test+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+tc.mutant)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a driver that is broken (%s):\n%s", tc.mutant, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestMemDriver/"+tc.test+" ") {
				t.Fatalf("%s did not fail as expected:\n%s", tc.test, out)
			}
			t.Logf("%s fails %s as it should:\n%s", tc.mutant, tc.test, failLines(string(out)))
		})
	}
}

// failLines keeps the lines that say why a child failed.
func failLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ".go:") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	return strings.Join(keep, "\n")
}
