package stream

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCheckAsksForEveryScriptCommand: Check asks the ACL for every command
// the stream driver's scripts send (the shared timer and discard scripts'
// list-only branches push with LPUSH, which the discard list needs too).
func TestCheckAsksForEveryScriptCommand(t *testing.T) {
	t.Parallel()
	d, err := New(redistest.Client(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, n := range d.needs() {
		have = append(have, n.Cmd)
	}
	redistest.ScriptsCovered(t, have, nil,
		"lua", "../../internal/timers/lua", "../../internal/discards/lua", "../../internal/inspect/lua")
}
