package worker

import "time"

// SetDefaultTimeout makes d the default job timeout of p, which must not
// have started.
func SetDefaultTimeout(p *Pool, d time.Duration) { p.defaultTimeout = d }
