package middleware

import (
	_ "embed"

	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed lua/ratelimit.lua
	rateLimitLua string
	//go:embed lua/idempotency_begin.lua
	idemBeginLua string
	//go:embed lua/idempotency_release.lua
	idemReleaseLua string
	//go:embed lua/idempotency_extend.lua
	idemExtendLua string
)

// The scripts are immutable; every limiter and guard shares them, so the
// server keeps one SHA of each.
var (
	rateLimitScript   = script.New("middleware.ratelimit", rateLimitLua)
	idemBeginScript   = script.New("middleware.idempotency_begin", idemBeginLua)
	idemReleaseScript = script.New("middleware.idempotency_release", idemReleaseLua)
	idemExtendScript  = script.New("middleware.idempotency_extend", idemExtendLua)
)
