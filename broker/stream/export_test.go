package stream

import "github.com/conveyorq/conveyor/broker"

// ConsumerName returns the group member name of a consumer Open returned.
func ConsumerName(c broker.Consumer) string { return c.(*consumer).name }

// SetBlockHook makes c call f just before each blocking read. Set it before
// the first Fetch.
func SetBlockHook(c broker.Consumer, f func()) { c.(*consumer).blockHook = f }

// CompareIDs compares two stream entry IDs as Redis orders them.
func CompareIDs(a, b string) int { return compareIDs(a, b) }
