package timers

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed lua/purge.lua
	purgeLua    string
	purgeScript = script.New("timers.purge", purgeLua, Lib+groups.Lib)
)

// PurgeStep runs purge.lua once: it deletes up to n (at most MaxPage)
// pending timers of the queue, earliest due first, and returns how many it
// deleted and how many were pending before. A grouped job's retry it
// deletes lets the next job of its group in, to to.
func PurgeStep(ctx context.Context, rdb script.Processor, k Keys, to Target, n int) (deleted, held int64, err error) {
	ks, mode := k.ending(to)
	v, err := purgeScript.Run(ctx, rdb, ks, max(1, min(n, MaxPage)), mode, to.Group)
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
