// Package records holds what the list and stream drivers share about the
// records of finished jobs (broker.Records): the keys of a queue's records,
// the Lua helpers their settle scripts put in front of their own text to
// write one (record_put, with retention), the record's stored form, and the
// scripts that read them. Records implements broker.Records on them; the
// drivers embed it.
//
// docs/redis-keys.md describes the keys and the stored form.
package records

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Lib is the Lua text every script that writes or reads records starts
// with, after internal/timers' lib (it needs now_ms): record_put writes one
// and enforces retention, record_expire drops a step of expired ones.
//
//go:embed lua/lib.lua
var Lib string

var (
	//go:embed lua/get.lua
	getLua string
	//go:embed lua/page.lua
	pageLua string
	//go:embed lua/stats.lua
	statsLua string

	getScript   = script.New("records.get", getLua, timers.Lib+Lib)
	pageScript  = script.New("records.page", pageLua, timers.Lib+Lib)
	statsScript = script.New("records.stats", statsLua, timers.Lib+Lib)
)

// Keys are the record keys of one queue.
type Keys struct {
	Done   string // HASH job ID -> stored record
	At     string // ZSET job ID, score = when its record expires (unix ms)
	Counts string // HASH expired, dropped
}

// QueueKeys lays out the record keys of queue under prefix.
func QueueKeys(prefix, queue string) Keys {
	q := keys.Queue(prefix, queue)
	return Keys{Done: q.Part("done"), At: q.Part("done_at"), Counts: q.Part("done_counts")}
}

// List returns the keys in the order the scripts take them.
func (k Keys) List() []string { return []string{k.Done, k.At, k.Counts} }

// Needs are the commands the record scripts send on a queue's record keys
// k, for a driver's Check.
func Needs(k Keys) []redischeck.Need {
	key := redischeck.Key
	return []redischeck.Need{
		key(k.Done, "HSET", k.Done, "f", "v"),
		key(k.Done, "HGET", k.Done, "f"),
		key(k.Done, "HMGET", k.Done, "f"),
		key(k.Done, "HDEL", k.Done, "f"),
		key(k.At, "ZADD", k.At, "0", "m"),
		key(k.At, "ZRANGE", k.At, "0", "0"),
		key(k.At, "ZREM", k.At, "m"),
		key(k.At, "ZCARD", k.At),
		key(k.At, "ZCOUNT", k.At, "0", "0"),
		key(k.At, "ZPOPMIN", k.At),
		key(k.At, "ZSCORE", k.At, "m"),
		key(k.Counts, "HINCRBY", k.Counts, "f", "1"),
		key(k.Counts, "HSETNX", k.Counts, "f", "0"),
		key(k.Counts, "PEXPIRE", k.Counts, "1"),
	}
}

// CheckMax applies the default to a driver config's RecordMax (0: the
// default) and validates it.
func CheckMax(max int) (int, error) {
	switch {
	case max == 0:
		return broker.DefaultRecordMax, nil
	case max < 0:
		return 0, fmt.Errorf("RecordMax %d is negative", max)
	}
	return max, nil
}

// Args returns the settle script arguments for f, the record of a delivery
// of job id: keep in ms ("0" and no data when f is nil: no record) and the
// record's JSON. The JSON leaves out the times the script sets.
func Args(f *broker.FinishRecord, id string) (keep int64, data string, err error) {
	if f == nil {
		return 0, "", nil
	}
	if f.Keep < time.Millisecond {
		return 0, "", fmt.Errorf("record of job %q: Keep %v is under 1ms", id, f.Keep)
	}
	r := f.Record
	r.ID = id
	r.FinishedAt, r.ExpiresAt = time.Time{}, time.Time{}
	if len(r.Result) > broker.MaxRecordResult {
		return 0, "", fmt.Errorf("record of job %q: result of %d bytes, more than %d", id, len(r.Result), broker.MaxRecordResult)
	}
	r.Error = CutError(r.Error)
	b, err := json.Marshal(&r)
	if err != nil {
		return 0, "", fmt.Errorf("record of job %q: %w", id, err)
	}
	return f.Keep.Milliseconds(), string(b), nil
}

// CutError cuts an error text to broker.MaxRecordError bytes, on a rune
// boundary, saying that it did.
func CutError(s string) string {
	if len(s) <= broker.MaxRecordError {
		return s
	}
	const mark = " ... (cut)"
	n := broker.MaxRecordError - len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// Decode reads a stored record "<finished ms>,<expires ms>,<JSON>".
func Decode(v string) (*broker.JobRecord, error) {
	fin, rest, ok1 := strings.Cut(v, ",")
	exp, data, ok2 := strings.Cut(rest, ",")
	f, err1 := strconv.ParseInt(fin, 10, 64)
	e, err2 := strconv.ParseInt(exp, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, errors.New("records: a stored record without its times")
	}
	r := new(broker.JobRecord)
	if err := json.Unmarshal([]byte(data), r); err != nil {
		return nil, fmt.Errorf("records: stored record: %w", err)
	}
	r.FinishedAt, r.ExpiresAt = time.UnixMilli(f), time.UnixMilli(e)
	return r, nil
}

// Records implements broker.Records for a driver that keeps its records in
// this package's layout.
type Records struct {
	// Name starts every error ("list", "stream").
	Name string
	// Client is the driver's Redis client.
	Client redis.UniversalClient
	// Prefix is the driver's key prefix.
	Prefix string
	// Max is the driver's cap on a queue's records.
	Max int
}

var _ broker.Records = (*Records)(nil)

func (x *Records) keys(op, queue string) (Keys, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return Keys{}, fmt.Errorf("%s: %s: %w", x.Name, op, err)
	}
	return QueueKeys(x.Prefix, queue), nil
}

func (x *Records) wrap(op, queue string, err error) error {
	return fmt.Errorf("%s: %s of %q: %w", x.Name, op, queue, err)
}

// GetRecord returns the record of job id of queue, nil when there is none:
// one script call, O(1) but for a step of retention.
func (x *Records) GetRecord(ctx context.Context, queue, id string) (*broker.JobRecord, error) {
	k, err := x.keys("get record", queue)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("%s: get record: empty job ID", x.Name)
	}
	v, err := getScript.Run(ctx, x.Client, k.List(), id)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, x.wrap("get record", queue, err)
	}
	s, _ := v.(string)
	r, err := Decode(s)
	if err != nil {
		return nil, x.wrap("get record", queue, err)
	}
	return r, nil
}

// ListRecords returns a page of queue's records, the latest to expire
// first: one script call, O(log n + offset + limit).
func (x *Records) ListRecords(ctx context.Context, queue string, offset, limit int) ([]*broker.JobRecord, int64, error) {
	k, err := x.keys("list records", queue)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return nil, 0, fmt.Errorf("%s: list records: offset %d, limit %d: want offset >= 0 and limit 1 to %d", x.Name, offset, limit, broker.MaxInspectPage)
	}
	v, err := pageScript.Run(ctx, x.Client, k.List(), offset, limit)
	if err != nil {
		return nil, 0, x.wrap("list records", queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return nil, 0, x.wrap("list records", queue, fmt.Errorf("unexpected reply %v", v))
	}
	total, _ := r[0].(int64)
	out := make([]*broker.JobRecord, 0, len(r)-1)
	for _, e := range r[1:] {
		s, _ := e.(string)
		rec, err := Decode(s)
		if err != nil {
			return nil, 0, x.wrap("list records", queue, err)
		}
		out = append(out, rec)
	}
	return out, total, nil
}

// RecordStats returns the figures of queue's records: one script call.
func (x *Records) RecordStats(ctx context.Context, queue string) (broker.RecordStats, error) {
	k, err := x.keys("record stats", queue)
	if err != nil {
		return broker.RecordStats{}, err
	}
	v, err := statsScript.Run(ctx, x.Client, k.List())
	if err != nil {
		return broker.RecordStats{}, x.wrap("record stats", queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return broker.RecordStats{}, x.wrap("record stats", queue, fmt.Errorf("unexpected reply %v", v))
	}
	st := broker.RecordStats{MaxCount: x.Max}
	st.Count, _ = r[0].(int64)
	st.Expired, _ = r[1].(int64)
	st.DroppedByCount, _ = r[2].(int64)
	return st, nil
}

// ListJobs is an Inspector's ListJobs of the finished state on x (a
// driver's broker.Records): a page of records as JobInfos.
func ListJobs(ctx context.Context, x broker.Records, queue string, offset, limit int) ([]*broker.JobInfo, int64, error) {
	rs, total, err := x.ListRecords(ctx, queue, offset, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*broker.JobInfo, len(rs))
	for i, r := range rs {
		out[i] = Info(queue, r)
	}
	return out, total, nil
}

// Info returns r as an Inspector's JobInfo of queue (State JobFinished).
func Info(queue string, r *broker.JobRecord) *broker.JobInfo {
	return &broker.JobInfo{
		Message: broker.Message{ID: r.ID, Kind: r.Kind, Queue: queue, Retries: max(r.Attempt-1, 0),
			Recoveries: r.Recoveries, EnqueuedAt: r.EnqueuedAt},
		State:  broker.JobFinished,
		Record: r,
	}
}
