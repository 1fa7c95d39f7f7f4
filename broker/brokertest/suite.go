package brokertest

import (
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// Factory builds the driver under test on Client(t), with every key it
// stores under prefix. Each test calls it once with a prefix of its own; the
// keys under it are deleted when the test ends. A driver with background
// work should stop it in t.Cleanup.
type Factory func(t *testing.T, prefix string) broker.Driver

// env is what one test of the suite works with.
type env struct {
	d      broker.Driver
	caps   broker.Capabilities
	prefix string
}

// A test runs when need accepts the driver's capabilities; lacks names what
// is missing in the skip message.
type test struct {
	name  string
	need  func(broker.Capabilities) bool
	lacks string
	run   func(t *testing.T, e *env)
}

func always(broker.Capabilities) bool        { return true }
func atLeastOnce(c broker.Capabilities) bool { return c.AtLeastOnce }
func notFanOut(c broker.Capabilities) bool   { return !c.FanOut }
func fanOut(c broker.Capabilities) bool      { return c.FanOut }
func fifo(c broker.Capabilities) bool        { return c.FIFO }
func extend(c broker.Capabilities) bool      { return c.Extend && c.AtLeastOnce }
func discard(c broker.Capabilities) bool     { return c.Discard && c.AtLeastOnce }
func delays(c broker.Capabilities) bool      { return c.Delay }
func retryLater(c broker.Capabilities) bool  { return c.Delay && c.AtLeastOnce }
func pauses(c broker.Capabilities) bool      { return c.Pause }
func lacksSomething(c broker.Capabilities) bool {
	return !c.AtLeastOnce || !c.Delay || !c.Extend || !c.Discard
}

var tests = []test{
	{"RoundTrip", always, "", testRoundTrip},
	{"Batch", always, "", testBatch},
	{"FIFO", fifo, "FIFO", testFIFO},
	{"RedeliveryAfterLeaseExpiry", atLeastOnce, "AtLeastOnce", testRedelivery},
	{"StaleAckRefused", atLeastOnce, "AtLeastOnce", testStaleAck},
	{"ExtendKeepsLease", extend, "Extend and AtLeastOnce", testExtend},
	{"FetchCancel", always, "", testFetchCancel},
	{"FetchWakes", always, "", testFetchWakes},
	{"FetchIdle", always, "", testFetchIdle},
	{"Sleep", always, "", testSleep},
	{"FetchAfterClose", always, "", testFetchAfterClose},
	{"ExclusiveDelivery", notFanOut, "exclusive delivery (it has FanOut)", testExclusive},
	{"FanOut", fanOut, "FanOut", testFanOut},
	{"Retry", atLeastOnce, "AtLeastOnce", testRetry},
	{"Release", atLeastOnce, "AtLeastOnce", testRelease},
	{"Postpone", atLeastOnce, "AtLeastOnce", testPostpone},
	{"UniqueKey", atLeastOnce, "AtLeastOnce", testUniqueKey},
	{"Discard", discard, "Discard and AtLeastOnce", testDiscard},
	{"PoisonDiscarded", discard, "Discard and AtLeastOnce", testPoison},
	{"RecoveredInBatches", discard, "Discard and AtLeastOnce", testRecoveredInBatches},
	{"UndecodableDiscarded", discard, "Discard and AtLeastOnce", testUndecodable},
	{"DiscardsInspect", discard, "Discard and AtLeastOnce", testDiscardsInspect},
	{"DiscardsRedriveOne", discard, "Discard and AtLeastOnce", testDiscardsRedriveOne},
	{"DiscardsRedriveFilter", discard, "Discard and AtLeastOnce", testDiscardsRedriveFilter},
	{"DiscardsPurge", discard, "Discard and AtLeastOnce", testDiscardsPurge},
	{"DiscardsCountRetention", discard, "Discard and AtLeastOnce", testDiscardsCountRetention},
	{"DiscardsAgeRetention", discard, "Discard and AtLeastOnce", testDiscardsAgeRetention},
	{"DiscardsBounded", discard, "Discard and AtLeastOnce", testDiscardsBounded},
	{"DelayedEnqueue", delays, "Delay", testDelayedEnqueue},
	{"TimerCancel", delays, "Delay", testTimerCancel},
	{"TimerCancelAfterPromotion", delays, "Delay", testTimerCancelAfterPromotion},
	{"TimerReschedule", delays, "Delay", testTimerReschedule},
	{"TimerDuplicateID", delays, "Delay", testTimerDuplicateID},
	{"TimerPendingPages", delays, "Delay", testTimerPendingPages},
	{"TimerPromoteOnce", delays, "Delay", testTimerPromoteOnce},
	{"TimerNeverEarly", delays, "Delay", testTimerNeverEarly},
	{"TimerLate", delays, "Delay", testTimerLate},
	{"TimerRetryClash", retryLater, "Delay and AtLeastOnce", testTimerRetryClash},
	{"TimerWake", delays, "Delay", testTimerWake},
	{"CronFireOnce", delays, "Delay", testCronFireOnce},
	{"CronSeries", delays, "Delay", testCronSeries},
	{"InspectQueues", inspectable, "AtLeastOnce, Delay and Discard", testInspectQueues},
	{"InspectSizes", inspectable, "AtLeastOnce, Delay and Discard", testInspectSizes},
	{"InspectListJobs", inspectable, "AtLeastOnce, Delay and Discard", testInspectListJobs},
	{"InspectFindJob", inspectable, "AtLeastOnce, Delay and Discard", testInspectFindJob},
	{"InspectPurge", inspectable, "AtLeastOnce, Delay and Discard", testInspectPurge},
	{"InspectHostileQueueNames", inspectable, "AtLeastOnce, Delay and Discard", testInspectHostileQueueNames},
	{"DeleteQueue", inspectable, "AtLeastOnce, Delay and Discard", testDeleteQueue},
	{"UnsupportedOperations", lacksSomething, "nothing (it has every capability)", testUnsupported},
	{"NoKeysLeft", always, "", testNoKeysLeft},
	{"HostileQueueNames", always, "", testHostileQueueNames},
	{"InvalidMessages", always, "", testInvalidMessages},
	{"Check", always, "", testCheck},
	{"Pause", pauses, "Pause", testPause},
	{"KeptConsumersWake", keeps, "Keep and AtLeastOnce", testKeptConsumersWake},
	{"KeptRecovery", keeps, "Keep and AtLeastOnce", testKeptRecovery},
	{"KeeperElection", keeps, "Keep and AtLeastOnce", testKeeperElection},
	{"CancelJob", cancels, "Cancel, AtLeastOnce, Delay and Extend", testCancelJob},
	{"CancelJobWatchEnds", cancels, "Cancel, AtLeastOnce, Delay and Extend", testCancelJobWatchEnds},
	{"Records", keepsRecords, "Records, AtLeastOnce and Discard", testRecords},
	{"GroupUnsupported", noGroups, "nothing (it has Groups)", testGroupUnsupported},
	{"GroupOrder", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupOrder},
	{"GroupLimit", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupLimit},
	{"GroupFairness", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupFairness},
	{"GroupDuplicateID", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupDuplicateID},
	{"GroupCancel", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupCancel},
	{"GroupPurge", groups, "Groups, AtLeastOnce, Delay and Discard", testGroupPurge},
	{"LimitUnsupported", unlimited, "nothing (it has Limits)", testLimitUnsupported},
	{"LimitKind", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitKind},
	{"LimitQueue", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitQueue},
	{"LimitLeaseExpiry", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitLeaseExpiry},
	{"LimitRaise", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitRaise},
	{"LimitCancel", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitCancel},
	{"LimitInvalid", limited, "Limits, AtLeastOnce, Delay and Discard", testLimitInvalid},
	{"HistoryRecord", keepsHistory, "History and AtLeastOnce", testHistoryRecord},
	{"HistoryRetention", keepsHistory, "History and AtLeastOnce", testHistoryRetention},
	{"HistoryInvalid", keepsHistory, "History and AtLeastOnce", testHistoryInvalid},
}

// Run runs the conformance suite on the drivers f builds, as parallel
// subtests named after what they prove. Tests a driver's Capabilities do not
// call for are skipped with the reason.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			d := f(t, prefix)
			if d == nil {
				t.Fatal("Factory returned a nil driver")
			}
			caps := d.Capabilities()
			if !tc.need(caps) {
				t.Skipf("driver lacks %s", tc.lacks)
			}
			tc.run(t, &env{d: d, caps: caps, prefix: prefix})
		})
	}
}
