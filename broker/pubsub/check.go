package pubsub

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redischeck"
)

// Check pings the server, verifies it is Redis 7.0 or later (sharded
// pub/sub needs it), and tries what the driver sends: one PUBLISH (SPUBLISH
// when sharded) of an empty message and one subscription, on a channel no
// queue has (its queue name is empty), so no consumer receives anything.
// A process fails at start with an error naming what the ACL refuses
// rather than on first use.
func (d *Driver) Check(ctx context.Context) error {
	if err := redischeck.Check(ctx, d.rdb, d.log, "pubsub"); err != nil {
		return err
	}
	ch := keys.Channel(d.prefix, redischeck.ProbeQueue)
	pub, sub := "PUBLISH", "SUBSCRIBE"
	if d.sharded {
		pub, sub = "SPUBLISH", "SSUBSCRIBE"
	}
	var m redischeck.Missing
	var err error
	if d.sharded {
		err = d.rdb.SPublish(ctx, ch, "").Err()
	} else {
		err = d.rdb.Publish(ctx, ch, "").Err()
	}
	if err != nil && !m.Refused(err, pub, ch) {
		return fmt.Errorf("pubsub: check: %s: %w", pub, err)
	}
	ps, err := d.subscribe(ctx, ch)
	if err == nil {
		_ = ps.Close()
	} else if !m.Refused(err, sub, ch) {
		return fmt.Errorf("pubsub: check: %s: %w", sub, err)
	}
	return m.Err(ctx, d.rdb, "pubsub")
}
