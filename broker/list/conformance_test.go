package list_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/keys"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		rdb := brokertest.Client(t)
		d, err := list.New(rdb, &list.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return rawStorer{d, rdb, prefix}
	})
}

// rawStorer is the list driver with the suite's brokertest.RawStorer: it
// pushes values onto a queue's ready list as Enqueue pushes messages.
type rawStorer struct {
	*list.Driver
	rdb    redis.UniversalClient
	prefix string
}

func (d rawStorer) StoreRaw(ctx context.Context, queue string, values ...[]byte) error {
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = v
	}
	return d.rdb.LPush(ctx, keys.Queue(d.prefix, queue).Part("ready"), args...).Err()
}
