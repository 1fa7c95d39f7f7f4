package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/transition.lua
var transitionLua string

//go:embed lua/return_stock.lua
var returnStockLua string

var (
	transition  = redis.NewScript(transitionLua)
	returnStock = redis.NewScript(returnStockLua)
)

// The states of an order. An order is created unpaid; the first of its
// payment and its payment timer moves it to paid or cancelled, and nothing
// moves it again.
const (
	unpaid    = "unpaid"
	paid      = "paid"
	cancelled = "cancelled"
)

// shop keeps the demo's orders and stock in Redis. Its keys share the hash
// tag {shop} so that each script's keys are in one Cluster slot.
type shop struct {
	rdb redis.UniversalClient
	ns  string
}

func newShop(rdb redis.UniversalClient, prefix string) *shop {
	return &shop{rdb: rdb, ns: prefix + ":{shop}"}
}

func (s *shop) orderKey(id string) string { return s.ns + ":order:" + id }
func (s *shop) stockKey() string          { return s.ns + ":stock" }

// setStock puts units of item on the shelf.
func (s *shop) setStock(ctx context.Context, item string, units int) error {
	return s.rdb.HSet(ctx, s.stockKey(), item, units).Err()
}

// stockOf returns the units of item on the shelf.
func (s *shop) stockOf(ctx context.Context, item string) (int, error) {
	return s.rdb.HGet(ctx, s.stockKey(), item).Int()
}

// createOrder records an unpaid order for one unit of item and takes the
// unit off the shelf, both or neither (MULTI).
func (s *shop) createOrder(ctx context.Context, id, item string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.orderKey(id), "state", unpaid, "item", item)
		p.HIncrBy(ctx, s.stockKey(), item, -1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("create order %s: %w", id, err)
	}
	return nil
}

// transition moves order id from state from to state to if it is still in
// from, and reports whether this call moved it and the state the order is
// in afterwards.
func (s *shop) transition(ctx context.Context, id, from, to string) (moved bool, state string, err error) {
	reply, err := transition.Run(ctx, s.rdb, []string{s.orderKey(id)}, from, to).Slice()
	if err != nil {
		return false, "", fmt.Errorf("order %s: %s -> %s: %w", id, from, to, err)
	}
	if len(reply) != 2 {
		return false, "", fmt.Errorf("order %s: transition replied %v", id, reply)
	}
	n, _ := reply[0].(int64)
	state, _ = reply[1].(string)
	return n == 1, state, nil
}

// order returns the fields of order id.
func (s *shop) order(ctx context.Context, id string) (map[string]string, error) {
	return s.rdb.HGetAll(ctx, s.orderKey(id)).Result()
}

// errNotCancelled is returned when stock is to be given back for an order
// that was not cancelled.
var errNotCancelled = errors.New("order is not cancelled")

// giveBack returns a cancelled order's unit to the shelf, at most once per
// order whatever the number of calls; returned says whether this call did.
func (s *shop) giveBack(ctx context.Context, id string) (returned bool, err error) {
	n, err := returnStock.Run(ctx, s.rdb, []string{s.orderKey(id), s.stockKey()}).Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("order %s: return stock: %w", id, err)
	case n < 0:
		return false, fmt.Errorf("order %s: return stock: %w", id, errNotCancelled)
	}
	return n == 1, nil
}

// stockService stands for the warehouse system that takes a cancelled
// order's stock back: a remote call, so one that fails. Here it fails on
// purpose, as planned per order: a positive count fails that many calls
// and then works; outageUntilRepaired fails every call until Repair.
type stockService struct {
	shop *shop

	mu      sync.Mutex
	outages map[string]int
}

// outageUntilRepaired marks an order whose calls fail until Repair.
const outageUntilRepaired = -1

var (
	errStockTimeout  = errors.New("stock service: request timed out")
	errWarehouseDown = errors.New("stock service: warehouse unreachable")
)

func newStockService(s *shop, outages map[string]int) *stockService {
	return &stockService{shop: s, outages: outages}
}

// Return gives order id's unit back through the service. It is idempotent:
// calling it again after a failure, or after a success, returns the unit
// once in all.
func (ss *stockService) Return(ctx context.Context, id string) (returned bool, err error) {
	ss.mu.Lock()
	n := ss.outages[id]
	if n > 0 {
		ss.outages[id] = n - 1
	}
	ss.mu.Unlock()
	switch {
	case n > 0:
		return false, errStockTimeout
	case n == outageUntilRepaired:
		return false, errWarehouseDown
	}
	return ss.shop.giveBack(ctx, id)
}

// Repair ends the outage of order id's warehouse.
func (ss *stockService) Repair(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.outages, id)
}
