package conveyor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/groupcommit"
)

// DefaultMaxPayloadBytes caps a job's payload and headers unless configured
// otherwise.
const DefaultMaxPayloadBytes = 1 << 20

// DefaultMaxHeaders caps the headers of a job unless configured otherwise.
const DefaultMaxHeaders = 64

// MaxHeaderNameLen caps the name of a header, in bytes.
const MaxHeaderNameLen = 128

// ClientConfig configures a Client. The zero value is valid.
type ClientConfig struct {
	// DefaultQueue receives jobs whose options name no queue. Defaults to
	// "default".
	DefaultQueue string
	// MaxPayloadBytes caps what a job's own data costs in Redis: its encoded
	// payload plus its headers (the bytes of every name and value the
	// caller set). A job over it is refused with a *PayloadTooLargeError
	// (ErrPayloadTooLarge and ErrInvalidMessage). The kind and the ID (at
	// most 128 bytes each) do not count, nor do headers added after the
	// check: Conveyor's own (a delay's due time, a few dozen bytes) and an
	// EnqueueMiddleware's (trace context). Defaults to 1 MiB.
	MaxPayloadBytes int
	// MaxHeaders caps the headers a caller may set on one job; a job with
	// more is refused with ErrInvalidMessage, as is one with a header name
	// longer than MaxHeaderNameLen. Defaults to DefaultMaxHeaders (64).
	MaxHeaders int
	// Middleware wraps every enqueue, first outermost (tracing, unique keys).
	Middleware []EnqueueMiddleware
	// MaxRoundTrips caps the enqueue round trips the client has in flight at
	// once. A call that finds none in flight is sent at once; others wait
	// and are sent together in the next one (group commit), which is how
	// many goroutines calling Enqueue share a few round trips. A further
	// round trip starts beside those in flight only for at least 16 waiting
	// jobs: small concurrent round trips cost more than they save. Defaults
	// to 8.
	MaxRoundTrips int
	// Now is the clock for EnqueuedAt and new IDs. Defaults to time.Now.
	Now func() time.Time
}

// EnqueueFunc stores a batch of messages; nil means all are stored.
type EnqueueFunc func(ctx context.Context, msgs []*broker.Message) error

// EnqueueMiddleware wraps the enqueue path, as Middleware wraps handlers.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc

// Client enqueues jobs. It is safe for concurrent use and needs no Close.
type Client struct {
	d     broker.Driver
	cfg   ClientConfig
	send  EnqueueFunc
	batch *groupcommit.Committer[[]*broker.Message]
}

// maxCoalesced caps the messages one shared round trip carries; it stays
// within what a driver stores in one script call per queue (the stream
// driver's 512), so that each queue's part of a shared round trip is stored
// or refused whole.
const maxCoalesced = 512

// minSharedBatch is the fewest waiting jobs that start a round trip beside
// one already in flight (see internal/groupcommit): with 50 goroutines
// calling Enqueue at once on the 2-vCPU development machine, 16 gave the
// list driver ~170,000 jobs/s against ~80,000 when any waiting job could
// start one, and the stream driver ~90,000 against ~60,000; 8 and 32 did
// no better.
const minSharedBatch = 16

// NewClient returns a client that enqueues through d.
func NewClient(d broker.Driver, cfg *ClientConfig) (*Client, error) {
	if d == nil {
		return nil, errors.New("conveyor: NewClient: nil driver")
	}
	c := &Client{d: d}
	if cfg != nil {
		c.cfg = *cfg
	}
	if c.cfg.DefaultQueue == "" {
		c.cfg.DefaultQueue = "default"
	}
	if err := broker.ValidateQueue(c.cfg.DefaultQueue); err != nil {
		return nil, fmt.Errorf("conveyor: NewClient: DefaultQueue: %w", err)
	}
	if c.cfg.MaxPayloadBytes == 0 {
		c.cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.cfg.MaxPayloadBytes < 0 {
		return nil, errors.New("conveyor: NewClient: MaxPayloadBytes is negative")
	}
	if c.cfg.MaxHeaders == 0 {
		c.cfg.MaxHeaders = DefaultMaxHeaders
	}
	if c.cfg.MaxHeaders < 0 {
		return nil, errors.New("conveyor: NewClient: MaxHeaders is negative")
	}
	if c.cfg.MaxRoundTrips == 0 {
		c.cfg.MaxRoundTrips = 8
	}
	if c.cfg.MaxRoundTrips < 0 {
		return nil, errors.New("conveyor: NewClient: MaxRoundTrips is negative")
	}
	if c.cfg.Now == nil {
		c.cfg.Now = time.Now
	}
	c.batch = groupcommit.New(c.cfg.MaxRoundTrips, minSharedBatch, maxCoalesced, func(b []*broker.Message) int { return len(b) }, c.sendBatches)
	c.send = c.batch.Do
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		c.send = c.cfg.Middleware[i](c.send)
	}
	return c, nil
}

// Enqueue stores one job of kind with args as its payload (see
// Request.Args) and returns the stored message. A nil error means the job is
// in Redis. An error is the one thing that went wrong, never a list of one.
func (c *Client) Enqueue(ctx context.Context, kind string, args any, opts *EnqueueOptions) (*broker.Message, error) {
	r := Request{Kind: kind, Args: args, Opts: opts}
	m, err := c.message(r, c.cfg.Now())
	if err != nil {
		return nil, err
	}
	msgs := []*broker.Message{m}
	if err := c.send(ctx, msgs); err != nil {
		return nil, oneError(hideGeneratedIDs(err, []Request{r}, msgs))
	}
	return m, nil
}

// EnqueueMany stores a batch of jobs in one round trip. Either every job is
// checked and sent, or none is: an invalid request fails the whole call
// before anything is stored, with a *RequestError naming its index in reqs.
// Refusals by the driver (a full queue, a duplicate) come as a
// *multierror.Error when there are several, as the error itself when there
// is one.
func (c *Client) EnqueueMany(ctx context.Context, reqs ...Request) ([]*broker.Message, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	now := c.cfg.Now()
	msgs := make([]*broker.Message, len(reqs))
	for i, r := range reqs {
		m, err := c.message(r, now)
		if err != nil {
			return nil, &RequestError{Index: i, Err: err}
		}
		msgs[i] = m
	}
	if err := c.send(ctx, msgs); err != nil {
		return nil, oneError(hideGeneratedIDs(err, reqs, msgs))
	}
	return msgs, nil
}

// hideGeneratedIDs clears the ID of each refused duplicate in err whose ID
// the client generated (its request set none), so that its message does
// not read as if the caller had chosen that ID: the caller never saw it.
// msgs[i] is the message of reqs[i].
func hideGeneratedIDs(err error, reqs []Request, msgs []*broker.Message) error {
	parts := []error{err}
	if m, isMulti := err.(*multierror.Error); isMulti {
		parts = m.WrappedErrors()
	}
	var index map[*broker.Message]int
	for _, e := range parts {
		var de *broker.DuplicateError
		if !errors.As(e, &de) || de.ID == "" {
			continue
		}
		if index == nil {
			index = make(map[*broker.Message]int, len(msgs))
			for i, m := range msgs {
				index[m] = i
			}
		}
		i, ok := index[de.Message]
		if !ok {
			// A driver that does not name the message: find it by ID.
			i = slices.IndexFunc(msgs, func(m *broker.Message) bool { return m.Queue == de.Queue && m.ID == de.ID })
		}
		if i >= 0 && (reqs[i].Opts == nil || reqs[i].Opts.ID == "") {
			de.ID = ""
		}
	}
	return err
}

// oneError returns the only error of a list of one: a call refused for one
// reason reads as that reason, not as "1 error occurred".
func oneError(err error) error {
	if m, ok := err.(*multierror.Error); ok && len(m.Errors) == 1 {
		return m.Errors[0]
	}
	return err
}

// sendBatches stores the messages of several Enqueue calls in one round
// trip (see groupcommit). Nothing is ever sent twice. Drivers store each
// queue's messages on their own and name the queue of each refusal
// (*broker.QueueError, with the messages it concerns when they are not all
// the queue's) and the message of each refused duplicate timer
// (*broker.DuplicateError), so a call learns only the errors of its own
// queues and messages: a full queue, or a full partition of a split
// queue, does not fail the calls whose messages went elsewhere. An error that names neither (Redis unreachable) fails every call
// of the batch; for them the outcome is unknown, as for any failed round
// trip.
func (c *Client) sendBatches(ctx context.Context, batches [][]*broker.Message) []error {
	errs := make([]error, len(batches))
	if len(batches) == 1 {
		errs[0] = c.d.Enqueue(ctx, batches[0])
		return errs
	}
	var all []*broker.Message
	for _, b := range batches {
		all = append(all, b...)
	}
	err := c.d.Enqueue(ctx, all)
	if err == nil {
		return errs
	}
	parts := []error{err}
	if m, isMulti := err.(*multierror.Error); isMulti {
		parts = m.WrappedErrors()
	}
	// Refusals by index in parts: of a whole queue, or of the messages
	// they name.
	byQueue := map[string]int{}
	byMessage := map[*broker.Message]int{}
	var dups []*broker.DuplicateError
	for k, e := range parts {
		var de *broker.DuplicateError
		var qe *broker.QueueError
		switch {
		case errors.As(e, &de):
			dups = append(dups, de)
		case errors.As(e, &qe) && qe.Messages != nil:
			for _, m := range qe.Messages {
				byMessage[m] = k
			}
		case errors.As(e, &qe):
			byQueue[qe.Queue] = k
		default:
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
	mine := make([]*multierror.Error, len(batches))
	for i, b := range batches {
		seen := map[int]bool{}
		for _, m := range b {
			k, ok := byQueue[m.Queue]
			if !ok {
				k, ok = byMessage[m]
			}
			if ok && !seen[k] {
				seen[k] = true
				mine[i] = multierror.Append(mine[i], parts[k])
			}
		}
	}
	// A refusal names the refused message, the pointer this call sent.
	owner := make(map[*broker.Message]int, len(all))
	for i, b := range batches {
		for _, m := range b {
			owner[m] = i
		}
	}
	for _, de := range dups {
		i, ok := owner[de.Message]
		if !ok {
			// A driver that does not name the message: the outcome of
			// every call with that ID is unknown.
			for j, b := range batches {
				for _, m := range b {
					if m.Queue == de.Queue && m.ID == de.ID {
						mine[j] = multierror.Append(mine[j], de)
						break
					}
				}
			}
			continue
		}
		mine[i] = multierror.Append(mine[i], de)
	}
	for i := range errs {
		errs[i] = mine[i].ErrorOrNil()
	}
	return errs
}

// Cancel removes the pending timer id of queue (the client's DefaultQueue
// when empty): a job enqueued with a delay or run-at that has not become
// ready yet. It reports whether the timer was still pending; for any timer
// exactly one of Cancel and its promotion wins, so "payment vs timeout"
// races have one winner. See package delay.
func (c *Client) Cancel(ctx context.Context, queue, id string) (bool, error) {
	t, queue, err := c.timers(queue)
	if err != nil {
		return false, err
	}
	return t.Cancel(ctx, queue, id)
}

// Reschedule moves the pending timer id of queue (the client's
// DefaultQueue when empty) to at, and reports whether it was still pending.
func (c *Client) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	t, queue, err := c.timers(queue)
	if err != nil {
		return false, err
	}
	return t.Reschedule(ctx, queue, id, at)
}

// CancelJob cancels the job id of queue (the client's DefaultQueue when
// empty) wherever it is, and reports the state it was in when cancelled:
//
//   - JobDelayed: its timer is removed (as Cancel does);
//   - JobReady: it is removed before any worker took it;
//   - JobInFlight: a worker holds it. The pool that runs it cancels its
//     handler's context with cause ErrJobCanceled, usually within
//     milliseconds (a published notice) and at the latest by its next
//     heartbeat or Job.Extend; a job waiting in the pool to start never
//     starts (docs/cancel.md lists the edges). Unless
//     the handler still finishes it (returns nil: the job is acked as
//     done), the job is removed, is not retried, and its outcome is
//     OutcomeCanceled. If its worker died, the job is removed when its
//     lease runs out instead of running again.
//
// It returns 0 and no error when no job id is delayed, ready or in flight
// in queue: it already finished, was discarded, or never existed. Unlike
// Cancel, which settles a "payment vs timeout" race with one winner, a
// CancelJob of a job that already started stops it mid-way: use Cancel to
// take back a timer, CancelJob to stop work. Finding a ready or in-flight
// job walks those states in bounded steps (docs/cancel.md has the cost).
// The driver needs Capabilities.Cancel (the list and stream drivers).
func (c *Client) CancelJob(ctx context.Context, queue, id string) (JobState, error) {
	if queue == "" {
		queue = c.cfg.DefaultQueue
	}
	return cancelJob(ctx, c.d, queue, id)
}

func cancelJob(ctx context.Context, d broker.Driver, queue, id string) (JobState, error) {
	cn, ok := d.(broker.Canceler)
	if !ok || !d.Capabilities().Cancel {
		return 0, fmt.Errorf("conveyor: cancel job: driver %T cannot cancel jobs: %w", d, broker.ErrUnsupported)
	}
	st, err := cn.CancelJob(ctx, queue, id)
	if err != nil {
		return 0, fmt.Errorf("conveyor: cancel job: %w", err)
	}
	return st, nil
}

func (c *Client) timers(queue string) (broker.Timers, string, error) {
	if queue == "" {
		queue = c.cfg.DefaultQueue
	}
	t, ok := c.d.(broker.Timers)
	if !ok || !c.d.Capabilities().Delay {
		return nil, "", fmt.Errorf("conveyor: driver %T has no timers: %w", c.d, broker.ErrUnsupported)
	}
	return t, queue, nil
}
