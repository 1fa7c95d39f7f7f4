package list

import (
	_ "embed"

	"github.com/conveyorq/conveyor/internal/script"
)

// lib.lua holds helpers every script uses. Redis has no shared script
// modules outside FUNCTION (which miniredis lacks), so each script is the
// fixed text of lib.lua followed by its own file: still one EVAL, still
// fixed text, and the helpers are written and tested once.
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
)

// The scripts are immutable after init; sharing them between drivers lets
// every driver reuse the SHA the server already has.
var (
	enqueueScript = script.New("list.enqueue", libLua+enqueueLua)
	fetchScript   = script.New("list.fetch", libLua+fetchLua)
	ackScript     = script.New("list.ack", libLua+ackLua)
	retryScript   = script.New("list.retry", libLua+retryLua)
	releaseScript = script.New("list.release", libLua+releaseLua)
	discardScript = script.New("list.discard", libLua+discardLua)
	extendScript  = script.New("list.extend", libLua+extendLua)
	reapScript    = script.New("list.reap", libLua+reapLua)
)
