package list

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// A settle (ack, retry, postpone, release, discard) whose earlier settle of
// the same delivery got no answer (the reply was lost, or came after the
// call's deadline) is reported as landed when the delivery's lease is gone
// and no reclaim took it, whenever it is tried again; when a reclaim took
// it, it fails with broker.ErrLeaseLost (see settleStatus). Without such a
// doubt, a settle of a settled delivery fails with broker.ErrLeaseLost.

// Ack settles deliveries as done and removes them from Redis, in one script
// call. A delivery whose lease was reclaimed fails with
// broker.ErrLeaseLost; the others are acked all the same.
//
// A delivery whose Finish is set gets its record of the finished job
// (broker.Records) in the same script call, and one of a group
// (Message.Group) lets the next job of its group in: such a batch runs
// ack_record.lua instead, with each delivery's record and group flag in
// its arguments.
func (c *consumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	if !slices.ContainsFunc(ds, func(d *broker.Delivery) bool { return d != nil && (d.Finish != nil || d.Message.Group != "") }) {
		_, err := c.settleBatch(ctx, "ack", ackScript, c.k.ack, nil, false, ds)
		return err
	}
	return c.ackRecorded(ctx, ds)
}

// ackRecorded is Ack of a batch in which some deliveries ask for a record
// or belong to a group: ack_record.lua, maxSettle deliveries per call.
func (c *consumer) ackRecorded(ctx context.Context, ds []*broker.Delivery) error {
	var errs *multierror.Error
	fail := func(d *broker.Delivery, err error) {
		errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: ack: %w", err)})
	}
	sent := make([]*broker.Delivery, 0, len(ds))
	recs := make([]any, 0, 4*len(ds))
	for _, d := range ds {
		err := c.checkDelivery(d)
		var keep int64
		var data string
		if err == nil {
			keep, data, err = records.Args(d.Finish, d.ID)
		}
		if err != nil {
			fail(d, err)
			continue
		}
		sent = append(sent, d)
		grouped := 0
		if d.Message.Group != "" {
			grouped = 1
		}
		recs = append(recs, d.ID, keep, data, grouped)
	}
	for start := 0; start < len(sent); start += maxSettle {
		call := sent[start:min(start+maxSettle, len(sent))]
		args := make([]any, 0, 2+5*len(call))
		args = append(args, len(call), c.d.cfg.RecordMax)
		for _, d := range call {
			args = append(args, d.Receipt)
		}
		args = append(args, recs[4*start:4*(start+len(call))]...)
		if _, err := c.settleCall(ctx, ackRecordScript, c.k.ackRecord, false, args, call, fail); err != nil {
			return fmt.Errorf("list: ack: %w", err)
		}
	}
	return errs.ErrorOrNil()
}

// Release hands deliveries back to the front of the ready list, in their
// order, without counting an attempt.
func (c *consumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	_, err := c.settleBatch(ctx, "release", releaseScript, c.k.release, nil, true, ds)
	return err
}

// Extend pushes the lease deadline of each delivery to now + ttl (Redis
// time) and updates LeaseDeadline of those it extended, by the local clock
// (see broker.Delivery.LeaseDeadline). A delivery whose lease is gone fails
// with broker.ErrLeaseLost; Extend never recreates one. A delivery whose
// job was cancelled (Driver.CancelJob) is extended and fails with
// broker.ErrJobCanceled, so that its holder stops it.
func (c *consumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("list: extend: ttl %v is under 1ms", ttl)
	}
	// Taken before sending: never later than the server's deadline.
	deadline := time.Now().Add(ttl.Truncate(time.Millisecond))
	deadlineMs, err := c.settleBatch(ctx, "extend", extendScript, c.k.extend, []any{ttl.Milliseconds()}, false, ds)
	if deadlineMs == 0 {
		return err
	}
	var failed map[*broker.Delivery]bool
	if me, ok := err.(*multierror.Error); ok {
		failed = make(map[*broker.Delivery]bool, len(me.Errors))
		for _, e := range me.Errors {
			if de, ok := e.(*broker.DeliveryError); ok && !errors.Is(de.Err, broker.ErrJobCanceled) {
				failed[de.Delivery] = true
			}
		}
	}
	for _, d := range ds {
		if d != nil && !failed[d] {
			d.LeaseDeadline = deadline
		}
	}
	return err
}

// Retry hands d back to run again at at (now or earlier: the back of the
// ready list; later: a timer under its ID, see package delay) and counts a
// failed attempt.
func (c *consumer) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return c.settleOne(ctx, "retry", retryScript, c.k.retry, d, timers.In(at), 1)
}

// Postpone hands d back to run again at at, as Retry does, without counting
// an attempt.
func (c *consumer) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return c.settleOne(ctx, "postpone", retryScript, c.k.retry, d, timers.In(at), 0)
}

// Discard moves d to the queue's discard list with reason. The list keeps
// Config.DiscardMax records, none older than Config.DiscardMaxAge; the
// oldest are dropped and counted.
//
// When d.Finish is set, the job's record (broker.Records) is written by
// the same script call.
func (c *consumer) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	var keep int64
	var id, data string
	if d != nil {
		var err error
		if keep, data, err = records.Args(d.Finish, d.ID); err != nil {
			return &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: discard: %w", err)}
		}
		id = d.ID
	}
	return c.settleOne(ctx, "discard", discardScript, c.k.discard, d, reason, c.d.cfg.DiscardMax, c.d.Keeper.Retention.AgeArg(),
		keep, id, data, c.d.cfg.RecordMax)
}

// settleStatus maps a settle script's status to its error, and reports
// whether the lease was gone without a reclaim taking it, which
// script.Doubts needs: the scripts tell the two ways a lease can be gone
// apart, where LeaseDeadline cannot (a reclaim runs after it; a settle may
// land before it and be tried again after).
//
// "GONE" is a lease no reclaim took (see lost_status in lib.lua): a settle
// ended it, so a doubted settle landed, whenever it is tried again.
// "LEASE_LOST" is a lease a reclaim took (or a token that is not the
// receipt's): no earlier settle ended it, so it is ErrLeaseLost, before
// LeaseDeadline too. Without a doubt both are ErrLeaseLost.
func settleStatus(status string) (gone bool, err error) {
	if status == "GONE" {
		return true, broker.ErrLeaseLost
	}
	return false, script.Status(status)
}

// checkDelivery reports why d cannot be settled by this consumer, if it
// cannot.
func (c *consumer) checkDelivery(d *broker.Delivery) error {
	switch {
	case d == nil:
		return fmt.Errorf("nil delivery: %w", broker.ErrInvalidMessage)
	case d.Queue != c.queue:
		return fmt.Errorf("delivery of queue %q settled on a consumer of %q: %w", d.Queue, c.queue, broker.ErrInvalidMessage)
	case d.Receipt == "" || d.Token == "":
		return fmt.Errorf("delivery without receipt or token: %w", broker.ErrInvalidMessage)
	case d.Token != receiptToken(d.Receipt):
		// The receipt names the delivery's token (see lib.lua); a token
		// that disagrees is not this delivery's (the batch scripts fence on
		// the receipt alone).
		return fmt.Errorf("delivery token %q is not its receipt's: %w", d.Token, broker.ErrLeaseLost)
	}
	return nil
}

// receiptToken returns the token a receipt "<token>,<len(id)>:<id>" names;
// "" when there is none.
func receiptToken(receipt string) string {
	tok, _, ok := strings.Cut(receipt, ",")
	if !ok {
		return ""
	}
	return tok
}

// settleOne runs a single-delivery script whose ARGV is receipt (the
// delivery's lease member), token, extra... and whose reply is a status.
func (c *consumer) settleOne(ctx context.Context, op string, s *script.Script, keys []string, d *broker.Delivery, extra ...any) error {
	if err := c.checkDelivery(d); err != nil {
		return &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: %s: %w", op, err)}
	}
	args := make([]any, 0, 2+len(extra))
	args = append(args, d.Receipt, d.Token)
	args = append(args, extra...)
	v, err := s.Run(ctx, c.d.client, keys, args...)
	var gone bool
	if err == nil {
		status, _ := v.(string)
		gone, err = settleStatus(status)
	}
	c.doubts.Note(d.Receipt, err)
	if err = c.doubts.Resolve(d.Receipt, gone, err); err != nil {
		return &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: %s: %w", op, err)}
	}
	return nil
}

// maxSettle caps the receipts of one batch script call, so that one call
// holds the server briefly; a longer batch takes several calls.
const maxSettle = 512

// settleBatch runs a batch script whose ARGV is head... then receipts, at
// most maxSettle receipts a call (the last ones first when backwards), and
// whose reply lists the receipts that
// failed as {k, status, ...}, after one leading integer when head is not
// empty (extend's deadline, returned: that of the last call that answered).
// The error is nil or a *multierror.Error of *broker.DeliveryError.
func (c *consumer) settleBatch(ctx context.Context, op string, s *script.Script, keys []string, head []any, backwards bool, ds []*broker.Delivery) (int64, error) {
	var errs *multierror.Error
	fail := func(d *broker.Delivery, err error) {
		errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: %s: %w", op, err)})
	}
	sent := make([]*broker.Delivery, 0, len(ds))
	for _, d := range ds {
		if err := c.checkDelivery(d); err != nil {
			fail(d, err)
			continue
		}
		sent = append(sent, d)
	}
	calls := slices.Collect(slices.Chunk(sent, maxSettle))
	// failed[i] holds the failures of calls[i], so that they are reported
	// in the order of ds whichever call runs first.
	failed := make([][]error, len(calls))
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	if backwards {
		// Each call pushes its batch to the front of ready: the last call
		// must carry the first deliveries.
		slices.Reverse(order)
	}
	var lead int64
	for _, i := range order {
		call := calls[i]
		args := make([]any, 0, len(head)+len(call))
		args = append(args, head...)
		for _, d := range call {
			args = append(args, d.Receipt)
		}
		l, err := c.settleCall(ctx, s, keys, len(head) > 0, args, call, func(d *broker.Delivery, err error) {
			failed[i] = append(failed[i], &broker.DeliveryError{Delivery: d, Err: fmt.Errorf("list: %s: %w", op, err)})
		})
		if err != nil {
			return lead, fmt.Errorf("list: %s: %w", op, err)
		}
		if l != 0 {
			lead = l
		}
	}
	for _, f := range failed {
		errs = multierror.Append(errs, f...)
	}
	return lead, errs.ErrorOrNil()
}

// settleCall runs one call of settleBatch for deliveries sent, reporting
// each delivery that failed to fail; an error is a reply it cannot read.
func (c *consumer) settleCall(ctx context.Context, s *script.Script, keys []string, hasLead bool, args []any, sent []*broker.Delivery, fail func(*broker.Delivery, error)) (int64, error) {
	v, err := s.Run(ctx, c.d.client, keys, args...)
	if err != nil {
		for _, d := range sent {
			if !hasLead { // extend keeps the leases: nothing to doubt
				c.doubts.Note(d.Receipt, err)
			}
			fail(d, err)
		}
		return 0, nil
	}
	reply, _ := v.([]any)
	var lead int64
	if hasLead {
		if len(reply) == 0 {
			return 0, fmt.Errorf("empty reply")
		}
		lead, _ = reply[0].(int64)
		reply = reply[1:]
	}
	for i := 0; i+1 < len(reply); i += 2 {
		k, _ := reply[i].(int64)
		status, _ := reply[i+1].(string)
		if k < 1 || int(k) > len(sent) {
			return lead, fmt.Errorf("reply names receipt %d of %d", k, len(sent))
		}
		d := sent[k-1]
		gone, err := settleStatus(status)
		if err = c.doubts.Resolve(d.Receipt, gone, err); err != nil {
			fail(d, err)
		}
	}
	return lead, nil
}
