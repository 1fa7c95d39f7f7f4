package stream

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

// The driver's scripts; each file's header names its KEYS, ARGV and reply.
var (
	// lib.lua holds helpers of the scripts that read or settle entries
	// (entry_body, lost_status, ack_entries); see lib.
	//
	//go:embed lua/lib.lua
	libSrc string
	//go:embed lua/enqueue.lua
	enqueueSrc string
	//go:embed lua/enqueue_plain.lua
	enqueuePlainSrc string
	//go:embed lua/fetch.lua
	fetchSrc string
	//go:embed lua/admit.lua
	admitSrc string
	//go:embed lua/ack.lua
	ackSrc string
	//go:embed lua/ack_record.lua
	ackRecordSrc string
	//go:embed lua/requeue.lua
	requeueSrc string
	//go:embed lua/discard.lua
	discardSrc string
	//go:embed lua/extend.lua
	extendSrc string
	//go:embed lua/close.lua
	closeSrc string
	//go:embed lua/prune.lua
	pruneSrc string

	enqueueScript = script.New("stream/enqueue", enqueueSrc, timers.Lib+groups.Lib)
	// enqueuePlainScript is enqueueScript for a batch of plain messages of
	// a queue without a cap.
	enqueuePlainScript = script.New("stream/enqueue_plain", enqueuePlainSrc)
	fetchScript        = script.New("stream/fetch", fetchSrc, timers.Lib+discards.Lib+cancels.Lib+groups.Lib+limits.Lib+lib)
	admitScript        = script.New("stream/admit", admitSrc, timers.Lib+cancels.Lib+groups.Lib+limits.Lib+lib)
	ackScript          = script.New("stream/ack", ackSrc, timers.Lib+groups.Lib+limits.Lib+lib)
	requeueScript      = script.New("stream/requeue", requeueSrc, timers.Lib+cancels.Lib+groups.Lib+limits.Lib+lib)
	discardScript      = script.New("stream/discard", discardSrc, timers.Lib+discards.Lib+records.Lib+groups.Lib+limits.Lib+lib)
	extendScript       = script.New("stream/extend", extendSrc, timers.Lib+cancels.Lib)
	closeScript        = script.New("stream/close", closeSrc)
	pruneScript        = script.New("stream/prune", pruneSrc)

	// ackRecordScript is ackScript for a batch in which some delivery asks
	// for a record of its finished job (internal/records) or belongs to a
	// group (internal/groups).
	ackRecordScript = script.New("stream/ack_record", ackRecordSrc, timers.Lib+records.Lib+groups.Lib+limits.Lib+lib)
)

// lib is what the scripts that read or settle entries put after
// internal/timers' helpers and the other packages' they use: the record of
// reclaimed leases (internal/reclaims), then lib.lua. The scripts that
// admit or release grouped jobs put internal/groups' helpers after those
// packages' (they need internal/timers' bulk and CHUNK), and the scripts
// that take or give back concurrency limit slots internal/limits' after
// those (they need internal/groups' group_message_id). ack.lua gives slots
// back, so it carries both; it touches no group key: a batch with a
// grouped delivery runs ack_record.lua. A script carries only the helpers
// its text reaches (internal/script), so a library it names but does not
// use costs it nothing.
var lib = reclaims.Lib + libSrc

// Limits that keep every script call short: a script blocks the server
// while it runs.
const (
	// maxBatch caps the messages or deliveries of one script call; larger
	// batches are split.
	maxBatch = 512
	// maxFetch caps Fetch's max.
	maxFetch = 1000
)
