package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Every settle and extension is fenced in its script: the entry must be
// pending, owned by this consumer, with the delivery count its token carries.
// A delivery whose lease expired and was taken over (by another
// consumer, or by this one again) fails with broker.ErrLeaseLost.
//
// A settle (ack, retry, postpone, release, discard) whose earlier settle of
// the same delivery got no answer (the reply was lost, or came after the
// call's deadline) is reported as landed when the delivery's entry is in
// neither the group's pending list nor the stream and no takeover took
// that delivery's lease (the queue's record of reclaimed leases, see
// internal/reclaims), whenever it is tried again: the earlier settle ended
// it. An entry still pending for another consumer or with another delivery
// count, still in the stream, or whose delivery a takeover took (another
// consumer may have settled it since) was not settled by the earlier call:
// its lease is lost, also before LeaseDeadline. Without such a doubt, a settle of a settled
// delivery fails with broker.ErrLeaseLost.

// Ack settles deliveries as done: their entries are acknowledged and deleted.
//
// A delivery whose Finish is set gets its record of the finished job
// (broker.Records) in the same script call, and one of a group
// (Message.Group) lets the next job of its group in: such a batch runs
// ack_record.lua instead, with each delivery's record and group flag in
// its arguments. A batch with neither runs ack.lua, which touches no
// record or group key.
func (c *consumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	if slices.ContainsFunc(ds, func(d *broker.Delivery) bool { return d != nil && (d.Finish != nil || d.Message.Group != "") }) {
		return c.ackRecorded(ctx, ds)
	}
	k := c.keys
	return c.batch(ctx, "ack", ackScript, slices.Concat([]string{k.stream, k.stats, k.reclaimed, k.wake}, k.limits.List()),
		func(chunk []*broker.Delivery) []any {
			lo, hi := receiptRange(chunk)
			return []any{c.d.cfg.Group, c.name, lo, hi}
		}, ds,
		func(args []any, d *broker.Delivery, count string) []any { return append(args, d.Receipt, count) }, nil)
}

// ackRecorded is Ack of a batch in which some deliveries ask for a record
// or belong to a group. A delivery whose record cannot be written
// (records.Args refuses it) fails with a *broker.DeliveryError and is not
// acked; the others are.
func (c *consumer) ackRecorded(ctx context.Context, ds []*broker.Delivery) error {
	if err := nilDelivery("ack", ds); err != nil {
		return err
	}
	type record struct {
		keep int64
		data string
	}
	var errs *multierror.Error
	recs := make(map[*broker.Delivery]record, len(ds))
	sent := make([]*broker.Delivery, 0, len(ds))
	for _, d := range ds {
		keep, data, err := records.Args(d.Finish, d.ID)
		if err != nil {
			errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("stream: ack: %w", err)})
			continue
		}
		recs[d] = record{keep, data}
		sent = append(sent, d)
	}
	k := c.keys
	err := c.batch(ctx, "ack", ackRecordScript, slices.Concat([]string{k.stream, k.stats, k.reclaimed, k.wake}, k.records.List(), k.groups.List(), k.limits.List()),
		func(chunk []*broker.Delivery) []any {
			lo, hi := receiptRange(chunk)
			return []any{c.d.cfg.Group, c.name, lo, hi, c.d.cfg.RecordMax}
		}, sent,
		func(args []any, d *broker.Delivery, count string) []any {
			r := recs[d]
			grouped := "0"
			if d.Message.Group != "" {
				grouped = "1"
			}
			return append(args, d.Receipt, count, d.ID, r.keep, r.data, grouped)
		}, nil)
	return multierror.Append(errs, err).ErrorOrNil()
}

// Retry hands d back with its attempt counted, to run again at at (now or
// earlier: at once, at the end of the stream; later: through the delayed set).
func (c *consumer) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return single(c.requeue(ctx, "retry", 1, timers.In(at), d))
}

// Postpone hands d back to run again at at, as Retry does, without counting
// an attempt.
func (c *consumer) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return single(c.requeue(ctx, "postpone", 0, timers.In(at), d))
}

// Release hands deliveries back to the end of the stream at once, without
// counting an attempt.
func (c *consumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return c.requeue(ctx, "release", 0, 0, ds...)
}

func (c *consumer) requeue(ctx context.Context, op string, inc int, at int64, ds ...*broker.Delivery) error {
	k := c.keys
	return c.batch(ctx, op, requeueScript, slices.Concat([]string{k.stream, k.delayed, k.timers.Timers, k.stats, k.reclaimed, k.wake, k.canceled}, k.groups.List(), k.limits.List()),
		fixed(c.d.cfg.Group, c.name, inc), ds,
		func(args []any, d *broker.Delivery, count string) []any { return append(args, d.Receipt, count, at) }, nil)
}

// Discard moves d to the queue's discard list with reason.
//
// When d.Finish is set, the job's record (broker.Records) is written by
// the same script call.
func (c *consumer) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	return single(c.discard(ctx, d, reason))
}

func (c *consumer) discard(ctx context.Context, d *broker.Delivery, reason string) error {
	var keep int64
	var data string
	if d != nil { // batch refuses a nil delivery
		var err error
		if keep, data, err = records.Args(d.Finish, d.ID); err != nil {
			return &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("stream: discard: %w", err)}
		}
	}
	k := c.keys
	return c.batch(ctx, "discard", discardScript, slices.Concat([]string{k.stream, k.dead, k.deadDropped, k.deadExpired, k.stats, k.reclaimed, k.wake}, k.records.List(), k.groups.List(), k.limits.List()),
		fixed(c.d.cfg.Group, c.name), []*broker.Delivery{d},
		func(args []any, d *broker.Delivery, count string) []any {
			return append(args, d.Receipt, count, reason, c.d.cfg.DiscardMax, c.d.Keeper.Retention.AgeArg(),
				keep, d.ID, data, c.d.cfg.RecordMax)
		}, nil)
}

// Extend pushes the lease deadlines of ds to now + ttl and updates their
// LeaseDeadline. A stream lease is the entry's idle time measured against the
// visibility timeout of whichever consumer takes it over, so a lease cannot
// reach further than one visibility timeout: a ttl above this consumer's
// visibility timeout is capped to it, and LeaseDeadline says so. A delivery
// whose job was cancelled (Driver.CancelJob) is extended and fails with
// broker.ErrJobCanceled, so that its holder stops it.
func (c *consumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	if ttl <= 0 {
		return fmt.Errorf("stream: extend: ttl %v is not positive", ttl)
	}
	ttl = min(ttl, c.vt)
	idle := (c.vt - ttl).Milliseconds()
	deadline := time.Now().Add(ttl)
	return c.batch(ctx, "extend", extendScript, []string{c.keys.stream, c.keys.canceled},
		fixed(c.d.cfg.Group, c.name, idle), ds,
		func(args []any, d *broker.Delivery, count string) []any { return append(args, d.Receipt, count) },
		func(d *broker.Delivery) { d.LeaseDeadline = deadline })
}

// batch runs s over ds, at most maxBatch deliveries per call. head returns
// a call's ARGV before its deliveries, item appends one delivery's ARGV
// given its delivery count (from the token). The reply is one status per
// delivery; onOK runs for each delivery settled, and for each extended
// whose job was cancelled (reported as broker.ErrJobCanceled: its lease
// holds all the same). The error is nil or a *multierror.Error of
// *broker.DeliveryError.
func (c *consumer) batch(ctx context.Context, op string, s *script.Script, keys []string, head func([]*broker.Delivery) []any,
	ds []*broker.Delivery, item func([]any, *broker.Delivery, string) []any, onOK func(*broker.Delivery)) error {
	var errs *multierror.Error
	valid := make([]*broker.Delivery, 0, len(ds))
	counts := make([]string, 0, len(ds))
	if err := nilDelivery(op, ds); err != nil {
		return err
	}
	for _, d := range ds {
		count, err := c.check(d)
		if err != nil {
			errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("stream: %s: %w", op, err)})
			continue
		}
		valid = append(valid, d)
		counts = append(counts, count)
	}
	for len(valid) > 0 {
		n := min(len(valid), maxBatch)
		chunk, chunkCounts := valid[:n], counts[:n]
		valid, counts = valid[n:], counts[n:]
		h := head(chunk)
		args := make([]any, 0, len(h)+4*len(chunk))
		args = append(args, h...)
		for i, d := range chunk {
			args = item(args, d, chunkCounts[i])
		}
		v, err := s.Run(ctx, c.d.rdb, keys, args...)
		statuses, ok := v.([]any)
		if err == nil && (!ok || len(statuses) != len(chunk)) {
			err = fmt.Errorf("%s: unexpected reply %v", s.Name(), v)
		}
		var settled []*broker.Delivery // no longer this consumer's to hold
		for i, d := range chunk {
			e, gone := err, false
			if e == nil {
				code, _ := statuses[i].(string)
				if code == "GONE" {
					code, gone = "LEASE_LOST", true
				}
				e = script.Status(code)
			}
			if op != "extend" { // extend keeps the lease: nothing to doubt
				c.doubts.Note(d.Receipt, e)
				e = c.doubts.Resolve(d.Receipt, gone, e)
			}
			if op != "extend" && (e == nil || errors.Is(e, broker.ErrLeaseLost)) {
				settled = append(settled, d)
			}
			if e != nil {
				errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("stream: %s: %w", op, e)})
			}
			if onOK != nil && (e == nil || errors.Is(e, broker.ErrJobCanceled)) {
				onOK(d)
			}
		}
		c.unhold(settled)
	}
	return errs.ErrorOrNil()
}

// nilDelivery returns the error of op over ds when one of them is nil.
func nilDelivery(op string, ds []*broker.Delivery) error {
	if i := slices.Index(ds, nil); i >= 0 {
		return fmt.Errorf("stream: %s: delivery %d is nil", op, i)
	}
	return nil
}

// fixed returns a batch head that is the same for every call.
func fixed(args ...any) func([]*broker.Delivery) []any {
	return func([]*broker.Delivery) []any { return args }
}

// receiptRange returns the lowest and the highest entry ID among the
// receipts of ds (all checked by isEntryID), compared as numbers: ack.lua
// looks up the entries between them with one ranged XPENDING.
func receiptRange(ds []*broker.Delivery) (lo, hi string) {
	lo, hi = ds[0].Receipt, ds[0].Receipt
	for _, d := range ds[1:] {
		if compareIDs(d.Receipt, lo) < 0 {
			lo = d.Receipt
		} else if compareIDs(d.Receipt, hi) > 0 {
			hi = d.Receipt
		}
	}
	return lo, hi
}

// compareIDs compares two entry IDs <ms>-<seq> (digits of any length, as
// isEntryID accepts them) as Redis orders them: by ms, then by seq.
func compareIDs(a, b string) int {
	ams, aseq, _ := strings.Cut(a, "-")
	bms, bseq, _ := strings.Cut(b, "-")
	if c := compareDigits(ams, bms); c != 0 {
		return c
	}
	return compareDigits(aseq, bseq)
}

// compareDigits compares two unsigned decimal numbers of any length.
func compareDigits(a, b string) int {
	a = strings.TrimLeft(a, "0")
	b = strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return cmp.Compare(len(a), len(b))
	}
	return strings.Compare(a, b)
}

// check refuses a delivery this consumer cannot have handed out, before it
// reaches a script (a malformed entry ID would fail the whole batch there),
// and returns the delivery count its token carries.
func (c *consumer) check(d *broker.Delivery) (string, error) {
	if d.Queue != c.queue {
		return "", fmt.Errorf("delivery of queue %q settled by a consumer of %q", d.Queue, c.queue)
	}
	if !isEntryID(d.Receipt) {
		return "", fmt.Errorf("receipt %q is not a stream entry ID", d.Receipt)
	}
	count, ok := tokenCount(d.Token, d.Receipt)
	if !ok {
		// Not a token this driver handed out for this entry.
		return "", broker.ErrLeaseLost
	}
	return count, nil
}

// token returns the fencing token of a delivery of entry id with the given
// delivery count: "<entry ID>/<count>". The count alone is what the scripts
// check (with the owner); the entry ID makes the token unique over the
// message's life, since a retried or released message is a new entry whose
// count starts again at 1.
func token(id string, count int64) string {
	return id + "/" + strconv.FormatInt(count, 10)
}

// tokenCount returns the delivery count of a token of entry id.
func tokenCount(tok, id string) (string, bool) {
	if len(tok) < len(id)+2 || tok[:len(id)] != id || tok[len(id)] != '/' {
		return "", false
	}
	count := tok[len(id)+1:]
	for i := 0; i < len(count); i++ {
		if count[i] < '0' || count[i] > '9' {
			return "", false
		}
	}
	return count, true
}

// isEntryID reports whether s has the form <ms>-<seq> of a stream entry ID.
func isEntryID(s string) bool {
	dash := -1
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b == '-' && dash < 0 && i > 0:
			dash = i
		case b < '0' || b > '9':
			return false
		}
	}
	return dash > 0 && dash < len(s)-1 && len(s) <= 41
}

// single unwraps the error of a one-delivery batch to its *broker.DeliveryError.
func single(err error) error {
	if merr, ok := err.(*multierror.Error); ok && len(merr.Errors) == 1 {
		return merr.Errors[0]
	}
	return err
}
