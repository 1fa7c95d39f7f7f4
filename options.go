package conveyor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/timers"
	"github.com/conveyorq/conveyor/internal/ulid"
)

// EnqueueOptions are the per-call options of Enqueue. A nil *EnqueueOptions
// means all defaults. Conveyor uses nil-able option structs for every
// per-call option set (see docs/architecture.md).
type EnqueueOptions struct {
	// Queue to enqueue to. Defaults to the client's DefaultQueue.
	Queue string
	// ID of the job. Defaults to a new time-sortable ID. A caller-supplied
	// ID is a business key such as "order:123:timeout": a delayed job is a
	// timer that Client.Cancel and Client.Reschedule find by it, and a
	// second delayed job with the ID of a pending timer of the queue is
	// refused with ErrDuplicate.
	ID string
	// Headers travel with the job (trace context, correlation IDs). At most
	// ClientConfig.MaxHeaders (64 by default), names at most
	// MaxHeaderNameLen (128) bytes; their names and values count toward
	// ClientConfig.MaxPayloadBytes with the payload.
	Headers map[string]string
	// Delay makes the job ready after Delay. Must not be negative.
	Delay time.Duration
	// RunAt makes the job ready at RunAt; it wins over Delay when both are set.
	RunAt time.Time
	// UniqueKey, when set, makes Enqueue refuse the job with ErrDuplicate
	// (a *broker.DuplicateError naming the key) while another job of the
	// queue holds the key: the first job enqueued with it holds it for
	// UniqueFor, whether it has run by then or not. The producer's twin of
	// the idempotency middleware.
	UniqueKey string
	// UniqueFor is how long a UniqueKey is held. Defaults to 1h.
	UniqueFor time.Duration
	// MaxAttempts caps handler runs. Defaults to the pool's setting.
	MaxAttempts int
	// Timeout bounds one handler run. Defaults to the pool's setting.
	Timeout time.Duration
	// VisibilityTimeout overrides the pool's visibility timeout for this
	// job: how long its lease lasts without a heartbeat, so how soon it is
	// delivered again after its worker dies. It travels in the header
	// HeaderVisibilityTimeout. The stream driver can only shorten a lease
	// (its leases are idle times measured against the queue's timeout).
	VisibilityTimeout time.Duration
	// Record asks for a record of the finished job, kept this long: its
	// outcome, attempts, times, worker, last error and result
	// (Job.SetResult), found by Inspector.Job and listed as JobFinished
	// (docs/results.md). It travels in the header HeaderRecord and wins over
	// the pool's worker.Config.Records. 0: the pool's setting; at least 1ms
	// otherwise.
	Record time.Duration
	// Group puts the job in a FIFO group of its queue: a business key such
	// as an order ID or a tenant. Jobs of one group run GroupLimit at a
	// time (one by default), in enqueue order, across every process; a
	// retry or a crash keeps a job's place, and the group's next job starts
	// when it is acked, discarded or cancelled. Groups take turns with each
	// other. A grouped job cannot be delayed, and its ID must be unique
	// among the queue's grouped jobs (ErrDuplicate). docs/ordering.md.
	Group string
	// GroupLimit is how many jobs of Group may run (or wait for a retry)
	// at once: 0 or 1 for one at a time, in order; at most
	// broker.MaxGroupLimit. The group takes the limit of its latest job.
	GroupLimit int
}

// Request is one job of an EnqueueMany call.
type Request struct {
	Kind string
	// Args is the payload: []byte and json.RawMessage are stored as they are,
	// nil as an empty payload, anything else as its JSON encoding.
	Args any
	Opts *EnqueueOptions
}

// HeaderVisibilityTimeout carries a job's own visibility timeout
// (EnqueueOptions.VisibilityTimeout), in milliseconds.
const HeaderVisibilityTimeout = "conveyor-visibility-timeout"

// HeaderRecord carries how long a job's record is kept
// (EnqueueOptions.Record), in milliseconds.
const HeaderRecord = "conveyor-record"

// RecordOf returns how long m asks for its record to be kept, in its
// header; ok is false when it asks for nothing (or the header is
// malformed).
func RecordOf(m *broker.Message) (d time.Duration, ok bool) {
	return headerDuration(m, HeaderRecord)
}

// headerMillis reads m's header name as a count of milliseconds; ok is
// false when m has no such header or it is no integer. An absent header,
// the usual case, is not parsed: a parse error allocates, and these run
// for every job.
func headerMillis(m *broker.Message, name string) (ms int64, ok bool) {
	v, found := m.Headers[name]
	if !found {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil
}

// headerDuration reads m's header name as a positive duration in
// milliseconds no longer than maxRunAhead; ok is false when it is absent
// or is not one.
func headerDuration(m *broker.Message, name string) (d time.Duration, ok bool) {
	ms, ok := headerMillis(m, name)
	if !ok || ms <= 0 || ms > int64(maxRunAhead/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// HeaderRunAt carries the time a delayed job was due (unix milliseconds):
// the client sets it on every job enqueued with a Delay or RunAt, so that
// its queue wait (ReadyAt) counts from when it became due, not from
// when it was enqueued.
const HeaderRunAt = "conveyor-run-at"

// ReadyAt returns when m became ready to run on its first delivery: its
// due time when it was enqueued with a delay, else its EnqueuedAt.
func ReadyAt(m *broker.Message) time.Time {
	if ms, ok := headerMillis(m, HeaderRunAt); ok && ms > 0 {
		if at := time.UnixMilli(ms); at.After(m.EnqueuedAt) {
			return at
		}
	}
	return m.EnqueuedAt
}

// VisibilityTimeoutOf returns the visibility timeout m asks for in its
// header; ok is false when it asks for none (or the header is malformed).
func VisibilityTimeoutOf(m *broker.Message) (d time.Duration, ok bool) {
	return headerDuration(m, HeaderVisibilityTimeout)
}

// DefaultUniqueFor is how long a UniqueKey is held when EnqueueOptions does
// not say.
const DefaultUniqueFor = time.Hour

// maxRunAhead bounds how far in the future a job may be scheduled, so that a
// typo (year 9999) is an error rather than a job that never runs.
const maxRunAhead = timers.MaxAhead

// message builds the broker message for one request.
func (c *Client) message(r Request, now time.Time) (*broker.Message, error) {
	payload, err := encodeArgs(r.Args)
	if err != nil {
		return nil, fmt.Errorf("conveyor: encode args of %s: %w", r.Kind, err)
	}
	o := r.Opts
	if o == nil {
		o = &EnqueueOptions{}
	}
	hbytes, err := c.checkHeaders(o)
	if err != nil {
		return nil, err
	}
	if size := len(payload) + hbytes; size > c.cfg.MaxPayloadBytes {
		return nil, &PayloadTooLargeError{Kind: r.Kind, Size: size, Headers: hbytes, Limit: c.cfg.MaxPayloadBytes}
	}
	m := &broker.Message{
		ID: o.ID, Kind: r.Kind, Queue: o.Queue, Payload: payload, Headers: copyHeaders(o.Headers),
		MaxAttempts: o.MaxAttempts, Timeout: o.Timeout, EnqueuedAt: now,
		UniqueKey: o.UniqueKey, UniqueTTL: o.UniqueFor, Group: o.Group, GroupLimit: o.GroupLimit,
	}
	switch {
	case o.VisibilityTimeout < 0:
		return nil, &broker.MessageError{ID: o.ID, Field: "VisibilityTimeout", Reason: "negative"}
	case o.VisibilityTimeout > 0:
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[HeaderVisibilityTimeout] = strconv.FormatInt(max(o.VisibilityTimeout.Milliseconds(), 1), 10)
	}
	switch {
	case o.Record < 0:
		return nil, &broker.MessageError{ID: o.ID, Field: "Record", Reason: "negative"}
	case o.Record > maxRunAhead:
		return nil, &broker.MessageError{ID: o.ID, Field: "Record", Reason: "more than 100 years"}
	case o.Record > 0 && o.Record < time.Millisecond:
		return nil, &broker.MessageError{ID: o.ID, Field: "Record", Reason: "under 1ms"}
	case o.Record > 0:
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[HeaderRecord] = strconv.FormatInt(o.Record.Milliseconds(), 10)
	}
	if m.UniqueKey != "" && m.UniqueTTL == 0 {
		m.UniqueTTL = DefaultUniqueFor
	}
	if m.Queue == "" {
		m.Queue = c.cfg.DefaultQueue
	}
	if m.ID == "" {
		m.ID = ulid.New(now)
	}
	switch {
	case o.Delay < 0:
		return nil, &broker.MessageError{ID: o.ID, Field: "Delay", Reason: "negative"}
	case !o.RunAt.IsZero():
		if o.RunAt.Sub(now) > maxRunAhead {
			return nil, &broker.MessageError{ID: o.ID, Field: "RunAt", Reason: "more than 100 years ahead"}
		}
		m.RunAt = o.RunAt
	case o.Delay > 0:
		if o.Delay > maxRunAhead {
			return nil, &broker.MessageError{ID: o.ID, Field: "Delay", Reason: "more than 100 years"}
		}
		m.RunAt = now.Add(o.Delay)
	}
	if m.RunAt.After(now) {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[HeaderRunAt] = strconv.FormatInt(m.RunAt.UnixMilli(), 10)
	}
	if err := broker.ValidateMessage(m); err != nil {
		var me *broker.MessageError
		if o.ID == "" && errors.As(err, &me) {
			me.ID = "" // generated here: the caller never saw it
		}
		return nil, err
	}
	return m, nil
}

// checkHeaders applies the header limits to the caller's headers and
// returns their size, names and values, for the byte cap.
func (c *Client) checkHeaders(o *EnqueueOptions) (int, error) {
	if n := len(o.Headers); n > c.cfg.MaxHeaders {
		return 0, &broker.MessageError{ID: o.ID, Field: "Headers", Reason: fmt.Sprintf("%d, more than %d", n, c.cfg.MaxHeaders)}
	}
	size := 0
	for k, v := range o.Headers {
		if len(k) > MaxHeaderNameLen {
			// The name itself is not quoted: it may be any size.
			return 0, &broker.MessageError{ID: o.ID, Field: "Headers", Reason: fmt.Sprintf("a name of %d bytes, longer than %d", len(k), MaxHeaderNameLen)}
		}
		size += len(k) + len(v)
	}
	return size, nil
}

func encodeArgs(args any) ([]byte, error) {
	switch a := args.(type) {
	case nil:
		return nil, nil
	case []byte:
		return a, nil
	case json.RawMessage:
		return a, nil
	default:
		return json.Marshal(a)
	}
}

func copyHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}
