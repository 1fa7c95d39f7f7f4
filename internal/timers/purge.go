package timers

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed lua/purge.lua
	purgeLua    string
	purgeScript = script.New("timers.purge", purgeLua)
)

// PurgeStep runs purge.lua once: it deletes up to n (at most MaxPage)
// pending timers of the queue, earliest due first, and returns how many it
// deleted and how many were pending before.
func PurgeStep(ctx context.Context, rdb script.Processor, k Keys, n int) (deleted, held int64, err error) {
	v, err := purgeScript.Run(ctx, rdb, []string{k.Delayed, k.Timers}, max(1, min(n, MaxPage)))
	if err != nil {
		return 0, 0, fmt.Errorf("purge timers of %q: %w", k.Queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return 0, 0, fmt.Errorf("purge timers of %q: unexpected reply %v", k.Queue, v)
	}
	deleted, _ = r[0].(int64)
	held, _ = r[1].(int64)
	return deleted, held, nil
}
