package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
)

// A subscriber process is this program run again with these variables set.
// The test binary reads them too, so the tests run the same code.
const (
	childEnv    = "CONVEYOR_FANOUT_CHILD"     // "subscriber"
	childName   = "subscriber"                // the one kind of child
	nameEnv     = "CONVEYOR_FANOUT_NAME"      // the subscriber's number, for the report
	redisURLEnv = "CONVEYOR_FANOUT_REDIS_URL" // the publisher's Redis
	prefixEnv   = "CONVEYOR_FANOUT_PREFIX"    // the channel's and the rendezvous keys' prefix
)

// subscriberLife bounds a subscriber process that never hears the end of
// the broadcast (its publisher died): it must not linger.
const subscriberLife = 2 * time.Minute

// rendezvous names the two lists where the publisher and its subscriber
// processes meet: each subscriber pushes its name to ready once Redis has
// confirmed its subscription, and its tally to tallies at the end. The
// publisher blocks on them (BLPOP): waiting for an event, not for a while.
type rendezvous string

func (r rendezvous) ready() string   { return string(r) + ":fanout:ready" }
func (r rendezvous) tallies() string { return string(r) + ":fanout:tallies" }

// keyTTL bounds the rendezvous keys, in case the publisher dies before it
// deletes them.
const keyTTL = 10 * time.Minute

// subscriberProcess is the body of a subscriber process: it reads its
// settings from the environment, subscribes, and receives until the end of
// the broadcast. It also stops when its stdin closes (the publisher asked,
// or died).
func subscriberProcess(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, subscriberLife)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	opts, err := redis.ParseURL(os.Getenv(redisURLEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", redisURLEnv, err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	t, err := subscribe(ctx, rdb, os.Getenv(prefixEnv), os.Getenv(nameEnv))
	if err != nil {
		return err
	}
	if !t.Ended {
		return fmt.Errorf("subscriber %s: stopped before the end of the broadcast, after %d messages", t.Name, t.Received)
	}
	return nil
}

// subscribe is one subscriber: it opens the queue's channel on the pubsub
// driver, says it is ready, applies every price update it receives until
// the end marker, and reports its tally.
func subscribe(ctx context.Context, rdb redis.UniversalClient, prefix, name string) (*tally, error) {
	d, err := pubsub.New(rdb, &pubsub.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	// Open returns once Redis has confirmed the subscription: from now on
	// every message published on the channel reaches this consumer.
	c, err := d.Open(ctx, queue, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	r := rendezvous(prefix)
	if err := pushWithTTL(ctx, rdb, r.ready(), name+" (pid "+strconv.Itoa(os.Getpid())+")"); err != nil {
		return nil, err
	}

	t := newTally(name)
	for !t.Ended {
		ds, err := c.Fetch(ctx, 256)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				break // report what was received
			}
			return nil, err
		}
		for _, d := range ds {
			t.add(d)
		}
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	// The report must go out even when ctx ended: it says what was missed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := pushWithTTL(rctx, rdb, r.tallies(), string(b)); err != nil {
		return nil, err
	}
	return t, nil
}

// pushWithTTL appends v to the list key and bounds the key's life.
func pushWithTTL(ctx context.Context, rdb redis.UniversalClient, key, v string) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, key, v)
		p.Expire(ctx, key, keyTTL)
		return nil
	})
	return err
}

// tally is what one subscriber received.
type tally struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Received counts the price updates received, duplicates included.
	Received int `json:"received"`
	// First and Last are the sequence numbers of the first and the last
	// update received (-1 when none was).
	First int `json:"first"`
	Last  int `json:"last"`
	// Duplicates counts updates received more than once; OutOfOrder those
	// that came after a later one.
	Duplicates int `json:"duplicates"`
	OutOfOrder int `json:"out_of_order"`
	// Undecodable counts messages whose payload was not a price update.
	Undecodable int `json:"undecodable"`
	// Ended says the end marker arrived.
	Ended bool `json:"ended"`

	seen map[int]bool
}

func newTally(name string) *tally {
	return &tally{Name: name, PID: os.Getpid(), First: -1, Last: -1, seen: map[int]bool{}}
}

// add applies one delivery. A real subscriber would update its cache here.
func (t *tally) add(d *broker.Delivery) {
	if d.Kind == kindEnd {
		t.Ended = true
		return
	}
	var u priceUpdate
	if err := json.Unmarshal(d.Payload, &u); err != nil {
		t.Undecodable++
		return
	}
	t.Received++
	switch {
	case t.seen[u.Seq]:
		t.Duplicates++
		return
	case t.First < 0:
		t.First = u.Seq
	case u.Seq < t.Last:
		t.OutOfOrder++
	}
	t.seen[u.Seq] = true
	t.Last = max(t.Last, u.Seq)
}

// exactly reports whether t received the updates from to to-1, each once,
// in order, and nothing else.
func (t *tally) exactly(from, to int) bool {
	return t.Ended && t.Received == to-from && t.First == from && t.Last == to-1 &&
		t.Duplicates == 0 && t.OutOfOrder == 0 && t.Undecodable == 0
}

// String says what t received, for people.
func (t *tally) String() string {
	if t.Received == 0 {
		return fmt.Sprintf("subscriber %s (pid %d): received nothing", t.Name, t.PID)
	}
	s := fmt.Sprintf("subscriber %s (pid %d): received %d price updates, #%d to #%d", t.Name, t.PID, t.Received, t.First, t.Last)
	missing := t.Last - t.First + 1 - (t.Received - t.Duplicates)
	if missing == 0 && t.Duplicates == 0 && t.OutOfOrder == 0 && t.Undecodable == 0 {
		return s + ", in order, none twice"
	}
	return s + fmt.Sprintf(", %d missing, %d twice, %d out of order, %d undecodable", missing, t.Duplicates, t.OutOfOrder, t.Undecodable)
}
