package stream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		rdb := brokertest.Client(t)
		d, err := stream.New(rdb, &stream.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return rawStorer{d, rdb, prefix}
	})
}

// rawStorer is the stream driver with the suite's brokertest.RawStorer: it
// adds each value as an entry's message field, as Enqueue adds messages.
// The stream must exist (with its group): the suite enqueues first.
type rawStorer struct {
	*stream.Driver
	rdb    redis.UniversalClient
	prefix string
}

func (d rawStorer) StoreRaw(ctx context.Context, queue string, values ...[]byte) error {
	p := d.rdb.Pipeline()
	for _, v := range values {
		p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Queue(d.prefix, queue).Part("stream"), NoMkStream: true, Values: []any{"m", v}})
	}
	_, err := p.Exec(ctx)
	return err
}
