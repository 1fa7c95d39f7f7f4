package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/middleware"
)

// frontDoor refuses buy requests over the per-IP and per-user limits before
// they reach the gate, as a gateway in front of a flash sale would (nginx
// limit_req by IP and by user token, answering 503).
//
// The limits are middleware.RateLimit's: one distributed sliding-window
// limiter in Redis, shared by every process, the same code the consumer
// paces its database writes with. RateLimit hands a job over its limit back
// with Job.Postpone, which suits a job (it runs later); a buyer's request
// cannot wait in a queue, so each request goes through the limiter as a
// stand-in job whose settler turns that Postpone into a refusal.
type frontDoor struct {
	perIP, perUser conveyor.Middleware
}

func newFrontDoor(rdb redis.UniversalClient, prefix string, ipLimit, userLimit int, period time.Duration) (*frontDoor, error) {
	perIP, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{
		Limit: ipLimit, Period: period, Name: "ip", Prefix: prefix, Key: middleware.FromHeader("ip"),
	})
	if err != nil {
		return nil, err
	}
	perUser, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{
		Limit: userLimit, Period: period, Name: "user", Prefix: prefix, Key: middleware.FromHeader("user"),
	})
	if err != nil {
		return nil, err
	}
	return &frontDoor{perIP: perIP, perUser: perUser}, nil
}

// admit returns placed when the request may go on to the gate, else
// limitedIP or limitedUser. The IP is checked first, so that a request
// refused for its IP does not use up its user's budget.
func (f *frontDoor) admit(ctx context.Context, user, ip string) (outcome, error) {
	headers := map[string]string{"ip": ip, "user": user}
	if ok, err := pass(ctx, f.perIP, headers); err != nil || !ok {
		return limitedIP, err
	}
	if ok, err := pass(ctx, f.perUser, headers); err != nil || !ok {
		return limitedUser, err
	}
	return placed, nil
}

// pass runs one limiter on a stand-in job and reports whether it let the
// job through.
func pass(ctx context.Context, limit conveyor.Middleware, headers map[string]string) (bool, error) {
	var (
		r      refusal
		passed bool
	)
	job := conveyor.NewJob(&broker.Delivery{Message: broker.Message{
		ID: "buy-request", Kind: "buy", Queue: queue, Headers: headers,
	}}, &r)
	h := limit(conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error {
		passed = true
		return nil
	}))
	if err := h.ProcessJob(ctx, job); err != nil {
		return false, err
	}
	if !passed && !r.refused {
		return false, errors.New("front door: the limiter neither passed nor refused the request")
	}
	return passed, nil
}

// refusal is the settler of a stand-in request job: a Postpone (over the
// limit) is a refusal; a request job is never acked, retried or discarded.
type refusal struct{ refused bool }

var errNotAJob = errors.New("front door: a buy request is not a job")

func (r *refusal) Postpone(context.Context, *broker.Delivery, time.Time) error {
	r.refused = true
	return nil
}
func (r *refusal) Ack(context.Context, *broker.Delivery) error { return errNotAJob }
func (r *refusal) Retry(context.Context, *broker.Delivery, time.Time) error {
	return errNotAJob
}
func (r *refusal) Discard(context.Context, *broker.Delivery, string) error { return errNotAJob }
func (r *refusal) Extend(context.Context, *broker.Delivery, time.Duration) error {
	return errNotAJob
}
