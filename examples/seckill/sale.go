package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

// queue carries the sale's jobs: the orders the gate enqueues and their
// payment timers. Its name is the hash tag of every key the sale's scripts
// touch, so that on Redis Cluster they all live in the queue's slot.
const queue = "seckill"

// The job kinds.
const (
	kindCreate  = "order.create"  // written into the database by the consumer
	kindTimeout = "order.timeout" // an unpaid order's payment timer
)

// Order states, in Redis (the truth, changed by settle.lua) and mirrored in
// the database.
const (
	stateUnpaid    = "unpaid"
	statePaid      = "paid"
	stateCancelled = "cancelled"
)

var (
	//go:embed lua/buy.lua
	buySrc string
	//go:embed lua/settle.lua
	settleSrc string

	buyScript    = redis.NewScript(buySrc)
	settleScript = redis.NewScript(settleSrc)
)

// orderArgs is the payload of an order.create job.
type orderArgs struct {
	Order string `json:"order"`
	Sale  string `json:"sale"`
	User  string `json:"user"`
	IP    string `json:"ip"`
	// PlacedAt is when the gate accepted the order, unix ms.
	PlacedAt int64 `json:"placed_at"`
}

// timeoutArgs is the payload of an order.timeout job (a payment timer).
type timeoutArgs struct {
	Order string `json:"order"`
	Sale  string `json:"sale"`
}

// timerID is the business key of an order's payment timer: the ID that
// schedules it and that payment cancels it by.
func timerID(order string) string { return "order:" + order + ":timeout" }

// shop is the Redis side of the sales: stock, buyers and order states, under
// the queue's hash tag.
type shop struct {
	rdb       redis.UniversalClient
	d         *stream.Driver
	client    *conveyor.Client
	base      string // <prefix>:{<queue>}:app:
	streamKey string
	retention time.Duration // how long a settled order's state is kept
}

func newShop(rdb redis.UniversalClient, d *stream.Driver, client *conveyor.Client, prefix string, retention time.Duration) (*shop, error) {
	streamKey, err := d.StreamKey(queue)
	if err != nil {
		return nil, err
	}
	return &shop{
		rdb: rdb, d: d, client: client, streamKey: streamKey, retention: retention,
		base: prefix + ":{" + queue + "}:app:",
	}, nil
}

func (s *shop) stockKey(sale string) string  { return s.base + "sale:" + sale + ":stock" }
func (s *shop) buyersKey(sale string) string { return s.base + "sale:" + sale + ":buyers" }
func (s *shop) statsKey(sale string) string  { return s.base + "sale:" + sale + ":stats" }
func (s *shop) doneKey(sale string) string   { return s.base + "sale:" + sale + ":done" }
func (s *shop) orderKey(order string) string { return s.base + "order:" + order }

// open puts items units on sale. Opening a sale that is open already is an
// error: it would reset the stock under the buyers' feet.
func (s *shop) open(ctx context.Context, sale string, items int) error {
	ok, err := s.rdb.SetNX(ctx, s.stockKey(sale), items, 0).Result()
	if err != nil {
		return fmt.Errorf("open sale %s: %w", sale, err)
	}
	if !ok {
		return fmt.Errorf("open sale %s: already open", sale)
	}
	return nil
}

// outcome is the gate's (or the front door's) answer to one buy request.
type outcome int

const (
	placed      outcome = iota // the order is queued
	soldOut                    // no stock left
	duplicate                  // the user already holds an order
	limitedIP                  // the front door's per-IP limit refused it
	limitedUser                // the front door's per-user limit refused it
	notOpen                    // the sale is not open
	outcomes
)

var outcomeNames = [outcomes]string{"placed", "sold out", "duplicate user", "rate limited (ip)", "rate limited (user)", "not open"}

func (o outcome) String() string { return outcomeNames[o] }

// buyResult is what the gate said.
type buyResult struct {
	Outcome outcome
	// Order is the new order (placed) or the one the user holds (duplicate).
	Order string
	// Left is the stock after a placed order.
	Left int64
}

// buy runs the gate for user: one atomic script decides and, for a placed
// order, enqueues its order.create job in the same step.
func (s *shop) buy(ctx context.Context, sale, user, ip string) (buyResult, error) {
	now := time.Now()
	order := newOrderID(now)
	payload, err := json.Marshal(orderArgs{Order: order, Sale: sale, User: user, IP: ip, PlacedAt: now.UnixMilli()})
	if err != nil {
		return buyResult{}, err
	}
	// The job skips what a Client would do before the driver (see
	// broker/stream/external.go): no enqueue middleware, so no tracing
	// headers; no payload cap, which this small payload does not need.
	add, err := s.d.PrepareAdd(&broker.Message{
		ID: order, Kind: kindCreate, Queue: queue, Payload: payload, EnqueuedAt: now,
		Headers: map[string]string{"ip": ip, "user": user},
	})
	if err != nil {
		return buyResult{}, err
	}
	v, err := buyScript.Run(ctx, s.rdb,
		[]string{s.stockKey(sale), s.buyersKey(sale), s.orderKey(order), add.StreamKey, add.SignalKey},
		user, order, sale, add.Group, add.Stored).Slice()
	if err != nil {
		return buyResult{}, fmt.Errorf("buy: %w", err)
	}
	if len(v) != 2 {
		return buyResult{}, fmt.Errorf("buy: unexpected reply %v", v)
	}
	code, _ := v[0].(int64)
	switch code {
	case 0:
		left, _ := v[1].(int64)
		return buyResult{Outcome: placed, Order: order, Left: left}, nil
	case 1:
		return buyResult{Outcome: soldOut}, nil
	case 2:
		held, _ := v[1].(string)
		return buyResult{Outcome: duplicate, Order: held}, nil
	case 3:
		return buyResult{Outcome: notOpen}, nil
	}
	return buyResult{}, fmt.Errorf("buy: unexpected reply %v", v)
}

// newOrderID returns a unique order ID that sorts by time: the Unix
// millisecond in base 36, then 50 random bits.
func newOrderID(now time.Time) string {
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + strings.ToLower(rand.Text()[:10])
}

// settle moves order from unpaid to state (paid or cancelled; cancelled
// gives its unit back) and reports whether this call did it.
func (s *shop) settle(ctx context.Context, sale, order, state string) (bool, error) {
	n, err := settleScript.Run(ctx, s.rdb, []string{s.orderKey(order), s.stockKey(sale), s.statsKey(sale)},
		state, s.retention.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("settle order %s: %w", order, err)
	}
	return n == 1, nil
}

// state returns order's state in Redis ("" when unknown or expired).
func (s *shop) state(ctx context.Context, order string) (string, error) {
	st, err := s.rdb.HGet(ctx, s.orderKey(order), "state").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return st, err
}

// stock returns the units left.
func (s *shop) stock(ctx context.Context, sale string) (int64, error) {
	return s.rdb.Get(ctx, s.stockKey(sale)).Int64()
}

// stockAndReturned returns the units left and the units given back so far,
// read together (MULTI): settle.lua changes both in one step, so the pair
// is always consistent with the orders placed.
func (s *shop) stockAndReturned(ctx context.Context, sale string) (left, returned int64, err error) {
	var leftCmd, returnedCmd *redis.StringCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		leftCmd = p.Get(ctx, s.stockKey(sale))
		returnedCmd = p.HGet(ctx, s.statsKey(sale), "returned")
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("stock of sale %s: %w", sale, err)
	}
	if left, err = leftCmd.Int64(); err != nil {
		return 0, 0, fmt.Errorf("stock of sale %s: %w", sale, err)
	}
	if returned, err = returnedCmd.Int64(); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("units given back in sale %s: %w", sale, err)
	}
	return left, returned, nil
}

// buyers returns how many users hold an order of the sale.
func (s *shop) buyers(ctx context.Context, sale string) (int64, error) {
	return s.rdb.HLen(ctx, s.buyersKey(sale)).Result()
}

// count adds n to one of the sale's counters, which the consumers of every
// process share (see saleStats).
func (s *shop) count(ctx context.Context, sale, field string, n int64) error {
	return s.rdb.HIncrBy(ctx, s.statsKey(sale), field, n).Err()
}

// saleStats are the counters the consumers keep in Redis. They are figures,
// not the record (the database is): a consumer killed between a write and
// its counter loses the count, and the job's replay counts as Replayed.
// Returned is the exception: settle.lua counts it with the unit it gives
// back, in one step.
type saleStats struct {
	Written    int64 // order rows inserted
	Replayed   int64 // order jobs run again whose row was there already
	DBRejected int64 // orders the database refused (user held another order)
	TimedOut   int64 // unpaid orders cancelled by their payment timer
	Returned   int64 // units given back to the stock by cancelled orders
	Done       int64 // distinct orders fully handled (row and timer)
}

func (s *shop) stats(ctx context.Context, sale string) (saleStats, error) {
	var st saleStats
	m, err := s.rdb.HGetAll(ctx, s.statsKey(sale)).Result()
	if err != nil {
		return st, err
	}
	get := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	st.Written, st.Replayed, st.DBRejected = get("written"), get("replayed"), get("db_rejected")
	st.TimedOut, st.Returned = get("timed_out"), get("returned")
	st.Done, err = s.rdb.SCard(ctx, s.doneKey(sale)).Result()
	return st, err
}

// markDone records that order's job got to its end; a set, so that a job
// run twice counts once.
func (s *shop) markDone(ctx context.Context, sale, order string) error {
	return s.rdb.SAdd(ctx, s.doneKey(sale), order).Err()
}

// isDone reports whether order's job got to its end.
func (s *shop) isDone(ctx context.Context, sale, order string) (bool, error) {
	return s.rdb.SIsMember(ctx, s.doneKey(sale), order).Result()
}

// payOutcome is what became of a payment.
type payOutcome int

const (
	payOK         payOutcome = iota // paid; the timer is cancelled
	payTooLate                      // the timer won: the order is cancelled
	payAlready                      // paid before
	payNotWritten                   // the order is not in the database yet
)

// pay settles order as paid unless its timer won, cancels the timer and
// brings the database row up to date. It reports whether the timer was
// still pending when cancelled.
func (s *shop) pay(ctx context.Context, store *orderStore, sale, order string) (payOutcome, bool, error) {
	if _, ok, err := store.status(ctx, order); err != nil {
		return 0, false, err
	} else if !ok {
		// The buyer pays an order they can see, which is once it is in the
		// database; its timer starts there too.
		return payNotWritten, false, nil
	}
	won, err := s.settle(ctx, sale, order, statePaid)
	if err != nil {
		return 0, false, err
	}
	var cancelled bool
	if won {
		// Exactly one of this cancel and the timer's firing wins; if the
		// timer fired first, its handler finds the order paid and does
		// nothing.
		if cancelled, err = s.client.Cancel(ctx, queue, timerID(order)); err != nil {
			return 0, false, err
		}
	}
	if err := syncStatus(ctx, s, store, order); err != nil {
		return 0, false, err
	}
	if won {
		return payOK, cancelled, nil
	}
	st, err := s.state(ctx, order)
	if err != nil {
		return 0, false, err
	}
	if st == statePaid {
		return payAlready, false, nil
	}
	return payTooLate, false, nil
}

// syncStatus mirrors order's settled state from Redis into its database
// row. Settled states are final, so writing one twice is harmless: a
// handler that died between the two writes is simply run again.
func syncStatus(ctx context.Context, s *shop, store *orderStore, order string) error {
	st, err := s.state(ctx, order)
	if err != nil {
		return err
	}
	if st != statePaid && st != stateCancelled {
		return nil
	}
	return store.setStatus(ctx, order, st)
}

// deleteKeys removes every key under prefix (the queue's, the sale's, the
// limiters' and the idempotency keys), so that a run leaves nothing behind.
func deleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	var firstErr error
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return err
	}
	return firstErr
}
