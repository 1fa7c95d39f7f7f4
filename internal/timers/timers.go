// Package timers holds what the list and stream drivers share about delayed
// messages: the timer keys of a queue, the Lua helpers their scripts put in
// front of their own text, and the scripts that promote, cancel, reschedule,
// list and fire timers. Only the push into the ready structure differs
// between the drivers, and promote.lua takes that as an argument.
//
// docs/delay.md describes the model; docs/redis-keys.md the keys.
package timers

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redissub"
	"github.com/conveyorq/conveyor/internal/script"
)

// Lib is the Lua text every script that touches timers starts with (see
// lua/lib.lua); the list driver's scripts share its general helpers too.
//
//go:embed lua/lib.lua
var Lib string

var (
	//go:embed lua/promote.lua
	promoteLua string
	//go:embed lua/cancel.lua
	cancelLua string
	//go:embed lua/reschedule.lua
	rescheduleLua string
	//go:embed lua/pending.lua
	pendingLua string
	//go:embed lua/fire.lua
	fireLua string

	promoteScript    = script.New("timers.promote", promoteLua, Lib)
	cancelScript     = script.New("timers.cancel", cancelLua, Lib+groups.Lib)
	rescheduleScript = script.New("timers.reschedule", rescheduleLua, Lib)
	pendingScript    = script.New("timers.pending", pendingLua)
	fireScript       = script.New("timers.fire", fireLua, Lib)
)

// Limits of one call.
const (
	// MaxPromote caps the timers one promote.lua call moves.
	MaxPromote = 1000
	// MaxPage caps the timers one PendingTimers call returns.
	MaxPage = 1000
)

// Keys are the timer keys of one queue and where promoted messages go.
type Keys struct {
	Queue   string
	Delayed string // ZSET timer ID -> due time (ms)
	Timers  string // HASH timer ID -> stored message
	Channel string // wake-up channel
	// CronSeries is the index of the queue's cron series: ZSET series
	// name -> when its last-fire record (Series) expires (ms).
	CronSeries string
	prefix     string
}

// QueueKeys lays out the timer keys of queue under prefix.
func QueueKeys(prefix, queue string) Keys {
	q := keys.Queue(prefix, queue)
	return Keys{Queue: queue, Delayed: q.Part("delayed"), Timers: q.Part("timers"), Channel: q.Part("wake"),
		CronSeries: q.Part("cron_series"), prefix: prefix}
}

// Unique returns the key that holds a unique key of the queue.
func (k Keys) Unique(key string) string {
	return keys.Queue(k.prefix, k.Queue).Part("unique:" + key)
}

// Series returns the key of a cron series' last-fire record.
func (k Keys) Series(series string) string {
	return keys.Queue(k.prefix, k.Queue).Part("cron:" + series)
}

// Target is where promote.lua pushes due messages.
type Target struct {
	Key    string // the ready LIST or the STREAM
	Stream bool
	Group  string // the stream's consumer group
	// Wake is the list's wake signal (internal/wake), set when it pushes
	// messages; "": none.
	Wake string
}

// Keys returns first, then the target's key and its wake signal if any: the
// KEYS of a script that pushes to the target.
func (to Target) Keys(first ...string) []string {
	ks := append(first[:len(first):len(first)], to.Key)
	if to.Wake != "" {
		ks = append(ks, to.Wake)
	}
	return ks
}

// In is how a due time travels to a script: the milliseconds from the
// local clock's now until at, rounded up (0 when at is zero or not after
// now). The script adds them to the server's clock, so a delay lasts as
// long as asked however far the two clocks are apart: a due time is a
// local time, and only the wait until it crosses to Redis.
func In(at time.Time) int64 {
	if at.IsZero() {
		return 0
	}
	d := time.Until(at)
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Score is the timer score of t: unix milliseconds rounded up, so that a
// timer is never due before t. The zero time and times before 1970 are 0.
func Score(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	ns := t.UnixNano()
	if ns <= 0 {
		return 0
	}
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// ending returns the KEYS of a script that removes timers and lets the
// next jobs of their groups in (cancel.lua, purge.lua): the timer keys,
// the queue's group keys, then to's keys; and to's mode, "list" or
// "stream".
func (k Keys) ending(to Target) ([]string, string) {
	mode := "list"
	if to.Stream {
		mode = "stream"
	}
	return to.Keys(append([]string{k.Delayed, k.Timers}, groups.QueueKeys(k.prefix, k.Queue).List()...)...), mode
}

// Promote runs promote.lua once.
func Promote(ctx context.Context, rdb script.Processor, k Keys, to Target, max int) (broker.Promotion, error) {
	if max < 1 {
		return broker.Promotion{}, fmt.Errorf("promote: max %d is not positive", max)
	}
	kind := "list"
	if to.Stream {
		kind = "stream"
	}
	v, err := promoteScript.Run(ctx, rdb, to.Keys(k.Delayed, k.Timers), min(max, MaxPromote), kind, to.Group)
	if err != nil {
		return broker.Promotion{}, fmt.Errorf("promote %q: %w", k.Queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return broker.Promotion{}, fmt.Errorf("promote %q: unexpected reply %v", k.Queue, v)
	}
	n, _ := r[0].(int64)
	next, _ := r[1].(int64)
	late, _ := r[2].(int64)
	p := broker.Promotion{Promoted: int(n), Next: -1, Late: time.Duration(late) * time.Microsecond}
	if next >= 0 {
		p.Next = time.Duration(next) * time.Microsecond
	}
	return p, nil
}

// Cancel runs cancel.lua: to is where the next job of a group goes when
// the timer was a grouped job's retry.
func Cancel(ctx context.Context, rdb script.Processor, k Keys, to Target, id string) (bool, error) {
	if err := validID(id); err != nil {
		return false, err
	}
	ks, mode := k.ending(to)
	v, err := cancelScript.Run(ctx, rdb, ks, id, mode, to.Group)
	if err != nil {
		return false, fmt.Errorf("cancel %q in %q: %w", id, k.Queue, err)
	}
	return v == int64(1), nil
}

// Reschedule runs reschedule.lua.
func Reschedule(ctx context.Context, rdb script.Processor, k Keys, id string, at time.Time) (bool, error) {
	if err := validID(id); err != nil {
		return false, err
	}
	if err := ValidRunAt(id, at, time.Now()); err != nil {
		return false, err
	}
	v, err := rescheduleScript.Run(ctx, rdb, []string{k.Delayed}, id, In(at))
	if err != nil {
		return false, fmt.Errorf("reschedule %q in %q: %w", id, k.Queue, err)
	}
	return v == int64(1), nil
}

// MaxFireAhead bounds how far ahead of the server's clock a cron fire may
// be stored (fire.lua refuses it otherwise).
const MaxFireAhead = time.Minute

// MaxAhead bounds how far ahead a timer may be due, so that a typo (the year
// 9999) is an error rather than a timer that never fires.
const MaxAhead = 100 * 365 * 24 * time.Hour

// ValidRunAt checks a due time given for message id.
func ValidRunAt(id string, at, now time.Time) error {
	if at.Sub(now) > MaxAhead {
		return &broker.MessageError{ID: id, Field: "RunAt", Reason: "more than 100 years ahead"}
	}
	return nil
}

func validID(id string) error {
	m := broker.Message{ID: id, Kind: "timer", Queue: "q"}
	return broker.ValidateMessage(&m)
}

// Pending runs pending.lua and decodes each stored message.
func Pending(ctx context.Context, rdb script.Processor, k Keys, offset, limit int) ([]*broker.Message, int64, error) {
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("pending timers of %q: offset %d, limit %d: want offset >= 0 and limit >= 1", k.Queue, offset, limit)
	}
	v, err := pendingScript.Run(ctx, rdb, []string{k.Delayed, k.Timers}, offset, min(limit, MaxPage))
	if err != nil {
		return nil, 0, fmt.Errorf("pending timers of %q: %w", k.Queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) < 1 || len(r)%2 != 1 {
		return nil, 0, fmt.Errorf("pending timers of %q: unexpected reply", k.Queue)
	}
	total, _ := r[0].(int64)
	out := make([]*broker.Message, 0, len(r)/2)
	for i := 1; i < len(r); i += 2 {
		due, _ := r[i].(string)
		body, _ := r[i+1].(string)
		m := &broker.Message{Queue: k.Queue}
		if _, err := codec.Decode([]byte(body), m); err != nil {
			return nil, 0, fmt.Errorf("pending timers of %q: %w", k.Queue, err)
		}
		ms, err := strconv.ParseFloat(due, 64)
		if err != nil || math.IsNaN(ms) {
			return nil, 0, fmt.Errorf("pending timers of %q: score %q", k.Queue, due)
		}
		m.RunAt = time.UnixMilli(int64(ms))
		out = append(out, m)
	}
	return out, total, nil
}

// Fire runs fire.lua: stored is the message's stored form, m.RunAt its due
// time.
func Fire(ctx context.Context, rdb script.Processor, k Keys, series string, m *broker.Message, stored []byte, keep time.Duration) (bool, error) {
	if err := broker.ValidateQueue(series); err != nil {
		return false, fmt.Errorf("fire: series %q: %w", series, err)
	}
	if m.RunAt.IsZero() {
		return false, &broker.MessageError{ID: m.ID, Field: "RunAt", Reason: "a fire needs its time"}
	}
	if m.Group != "" {
		// A fire is a timer, and a timer joins the queue when due without
		// waiting for its group (docs/ordering.md).
		return false, &broker.MessageError{ID: m.ID, Field: "Group", Reason: "a cron fire cannot be in a FIFO group: have its handler enqueue the grouped job"}
	}
	v, err := fireScript.Run(ctx, rdb, []string{k.Delayed, k.Timers, k.Series(series), k.CronSeries},
		Score(m.RunAt), m.ID, stored, max(keep.Milliseconds(), 1000), MaxFireAhead.Milliseconds(), series)
	if err != nil {
		return false, fmt.Errorf("fire %q in %q: %w", series, k.Queue, err)
	}
	return v == int64(1), nil
}

// LastFire reads a series' last-fire record.
func LastFire(ctx context.Context, rdb redis.Cmdable, k Keys, series string) (time.Time, bool, error) {
	if err := broker.ValidateQueue(series); err != nil {
		return time.Time{}, false, fmt.Errorf("last fire: series %q: %w", series, err)
	}
	ms, err := rdb.Get(ctx, k.Series(series)).Int64()
	if err == redis.Nil {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("last fire of %q in %q: %w", series, k.Queue, err)
	}
	return time.UnixMilli(ms), true, nil
}

// ListSeries returns the series in the queue's index whose last-fire
// records Redis holds, with their last fires, sorted by name: at most
// broker.MaxCronSeries, those whose records expire last when the index
// holds more. Two round trips: a ZRANGE of the index, then one pipeline of
// a GET per series.
func ListSeries(ctx context.Context, rdb redis.Cmdable, k Keys) ([]broker.CronSeries, error) {
	names, err := rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: k.CronSeries, Start: 0, Stop: broker.MaxCronSeries - 1, Rev: true}).Result()
	if err != nil {
		return nil, fmt.Errorf("cron series of %q: %w", k.Queue, err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	gets := make([]*redis.StringCmd, len(names))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			gets[i] = p.Get(ctx, k.Series(n))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("cron series of %q: %w", k.Queue, err)
	}
	out := make([]broker.CronSeries, 0, len(names))
	for i, n := range names {
		ms, err := gets[i].Int64()
		if err == redis.Nil {
			continue // its record expired since the last fire in the queue trimmed the index
		}
		if err != nil {
			return nil, fmt.Errorf("cron series %q of %q: %w", n, k.Queue, err)
		}
		out = append(out, broker.CronSeries{Name: n, LastFire: time.UnixMilli(ms)})
	}
	slices.SortFunc(out, func(a, b broker.CronSeries) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Watch subscribes to the queue's wake channel. The channel it returns gets
// a value (coalesced: at most one waits) per wake-up and is closed when ctx
// ends.
func Watch(ctx context.Context, rdb redis.UniversalClient, k Keys) (<-chan struct{}, error) {
	ps, err := redissub.Open(ctx, rdb, k.Channel)
	if err != nil {
		return nil, fmt.Errorf("watch timers of %q: %w", k.Queue, err)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		redissub.Serve(ctx, ps, func(*redis.Message) bool {
			select {
			case out <- struct{}{}:
			default:
			}
			return true
		})
	}()
	return out, nil
}

// EnqueueArgs appends to args, for each message of one queue, the
// ARGV items the drivers' enqueue.lua read (enqueue_each in lua/lib.lua):
// the wait until its run-at (see In; 0: now), the ID, the stored form, the
// position in KEYS of its unique key (0: none) and the unique key's TTL in
// ms; then, when stride is 7 (Stride: some message has a Group), its group
// ("" for none) and the group's limit. It returns keys with the unique keys
// appended.
func EnqueueArgs(k Keys, keys []string, args []any, msgs []*broker.Message, stride int, stored func(*broker.Message) []byte) ([]string, []any) {
	for _, m := range msgs {
		u, ttl := 0, int64(0)
		if m.UniqueKey != "" {
			keys = append(keys, k.Unique(m.UniqueKey))
			u, ttl = len(keys), max(m.UniqueTTL.Milliseconds(), 1)
		}
		args = append(args, In(m.RunAt), m.ID, stored(m), u, ttl)
		if stride == GroupedStride {
			args = append(args, m.Group, groups.Limit(m))
		}
	}
	return keys, args
}

// The strides of EnqueueArgs: items per message without groups and with.
const (
	PlainStride   = 5
	GroupedStride = 7
)

// Stride returns GroupedStride when some message of msgs has a Group,
// else PlainStride.
func Stride(msgs []*broker.Message) int {
	for _, m := range msgs {
		if m.Group != "" {
			return GroupedStride
		}
	}
	return PlainStride
}

// Plain reports whether msgs can be stored without a script: none is
// delayed, asks for a unique key or has a group.
func Plain(msgs []*broker.Message) bool {
	for _, m := range msgs {
		if !m.RunAt.IsZero() || m.UniqueKey != "" || m.Group != "" {
			return false
		}
	}
	return true
}

// Duplicates turns an enqueue script's reply (the 1-based numbers k of the
// refused messages of msgs: k for a duplicate timer, -k for a held unique
// key) into errors; nil for none.
func Duplicates(msgs []*broker.Message, reply any) *multierror.Error {
	ks, _ := reply.([]any)
	var errs *multierror.Error
	for _, v := range ks {
		i, ok := v.(int64)
		key := false
		if i < 0 {
			i, key = -i, true
		}
		if !ok || i < 1 || int(i) > len(msgs) {
			continue
		}
		m := msgs[i-1]
		e := &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Message: m}
		if key {
			e.Key = m.UniqueKey
		}
		errs = multierror.Append(errs, e)
	}
	return errs
}
