package list

import (
	_ "embed"

	"github.com/conveyorq/conveyor/internal/cancels"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/reclaims"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// lib.lua holds helpers every script uses. Redis has no shared script
// modules outside FUNCTION (which miniredis lacks), so each script is the
// fixed text of the libraries followed by its own file: still one EVAL,
// still fixed text, and the helpers are written and tested once.
var (
	//go:embed lua/lib.lua
	libLua string
	//go:embed lua/enqueue.lua
	enqueueLua string
	//go:embed lua/fetch.lua
	fetchLua string
	//go:embed lua/ack.lua
	ackLua string
	//go:embed lua/retry.lua
	retryLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/discard.lua
	discardLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/reap.lua
	reapLua string
	//go:embed lua/cancel.lua
	cancelLua string
	//go:embed lua/ack_record.lua
	ackRecordLua string
)

// lib is what every script starts with: internal/timers' helpers,
// internal/discards' (discard records and their retention),
// internal/reclaims' (the record of reclaimed leases), internal/cancels'
// (the marks of cancelled deliveries), internal/records' (records of
// finished jobs), internal/groups' (FIFO groups), internal/limits'
// (concurrency limits), then the driver's own.
var lib = timers.Lib + discards.Lib + reclaims.Lib + cancels.Lib + records.Lib + groups.Lib + limits.Lib + libLua

// The scripts are immutable after init; sharing them between drivers lets
// every driver reuse the SHA the server already has.
var (
	enqueueScript = script.New("list.enqueue", enqueueLua, lib)
	fetchScript   = script.New("list.fetch", fetchLua, lib)
	ackScript     = script.New("list.ack", ackLua, lib)
	retryScript   = script.New("list.retry", retryLua, lib)
	releaseScript = script.New("list.release", releaseLua, lib)
	discardScript = script.New("list.discard", discardLua, lib)
	extendScript  = script.New("list.extend", extendLua, lib)
	reapScript    = script.New("list.reap", reapLua, lib)
	cancelScript  = script.New("list.cancel", cancelLua, lib)

	ackRecordScript = script.New("list.ack_record", ackRecordLua, lib)
)
