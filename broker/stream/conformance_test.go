package stream_test

import (
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		d, err := stream.New(brokertest.Client(t), &stream.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
