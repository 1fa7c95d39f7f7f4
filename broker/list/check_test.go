package list

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCheckAsksForEveryScriptCommand: Check asks the ACL for every command
// the list driver's scripts send (but the stream-only branches of the
// shared timer and discard scripts).
func TestCheckAsksForEveryScriptCommand(t *testing.T) {
	t.Parallel()
	var have []string
	for _, n := range needs("p") {
		have = append(have, n.Cmd)
	}
	redistest.ScriptsCovered(t, have, []string{"XGROUP CREATE", "XADD"},
		"lua", "../../internal/timers/lua", "../../internal/discards/lua", "../../internal/inspect/lua", "../../internal/reclaims/lua",
		"../../internal/cancels/lua", "../../internal/records/lua")
}
