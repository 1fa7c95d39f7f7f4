package list_test

import (
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/list"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		d, err := list.New(brokertest.Client(t), &list.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
