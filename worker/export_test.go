package worker

import "time"

// SetDefaultTimeout makes d the default job timeout of p, which must not
// have started.
func SetDefaultTimeout(p *Pool, d time.Duration) { p.defaultTimeout = d }

// Room returns the size of p's waiting room.
func Room(p *Pool) int { return int(p.room.Load()) }

// AdaptiveRoomMax is what an unset Prefetch's room grows to at most, for a
// pool of fewer than half as many workers.
const AdaptiveRoomMax = adaptiveRoomMax
