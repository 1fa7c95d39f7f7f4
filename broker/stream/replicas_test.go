package stream_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
)

func TestReplicaWait(t *testing.T) {
	brokertest.RunReplicaWait(t, func(t *testing.T, rdb redis.UniversalClient, prefix string, n int, timeout time.Duration) (broker.Driver, error) {
		d, err := stream.New(rdb, &stream.Config{Prefix: prefix, WaitReplicas: n, WaitTimeout: timeout})
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}
