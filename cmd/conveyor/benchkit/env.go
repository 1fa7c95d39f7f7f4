package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker/shard"
)

// Config sets the size of the workloads. Durations are JSON nanoseconds.
type Config struct {
	// N is how many jobs a throughput or memory workload moves. Defaults
	// to 100,000.
	N int `json:"n"`
	// Payload is each job's payload in bytes, at least 8 (the first 8 carry
	// a timestamp). Defaults to 100.
	Payload int `json:"payload"`
	// Concurrency is the worker pool's concurrency, and the number of
	// goroutines of enqueue-parallel and of e2e-mixed's producers.
	// Defaults to 50.
	Concurrency int `json:"concurrency"`
	// Batch is the EnqueueMany batch of enqueue-batch. Defaults to 100.
	Batch int `json:"batch"`
	// Rate is the latency workload's jobs per second. Defaults to 2,000.
	Rate int `json:"rate"`
	// Duration is how long the latency and fleet workloads enqueue.
	// Defaults to 5s.
	Duration time.Duration `json:"duration"`
	// Timers is how many timers the delay workload schedules. Defaults to
	// 10,000.
	Timers int `json:"timers"`
	// Window is the span the delay workload's due times are spread over,
	// starting one second after they are enqueued. Defaults to 2s.
	Window time.Duration `json:"window"`
	// Idle is how long the idle and fleet workloads count commands.
	// Defaults to 5s.
	Idle time.Duration `json:"idle"`
	// Pools is the fleet workload's number of pools. Defaults to 200.
	Pools int `json:"pools"`
	// Split is the e2e-split workload's number of pools, of 10 workers
	// each, set against one pool of Split×10 workers. Defaults to 20.
	Split int `json:"split"`
	// Groups is the e2e-groups workload's number of FIFO groups.
	// Defaults to 1,000, or N when smaller.
	Groups int `json:"groups"`
	// Timeout bounds the wait for a workload's jobs to run. Defaults to 5m.
	Timeout time.Duration `json:"timeout"`
	// Partitions is how many partitions the sharded workload splits its
	// queue into, set against the whole queue: 2 to shard.MaxPartitions.
	// 0 means DefaultPartitions: WithDefaults leaves it 0, and Start's
	// Report gives the count used.
	Partitions int `json:"partitions"`
}

// DefaultPartitions is the sharded workload's partition count when
// Config.Partitions is 0.
const DefaultPartitions = 6

// WithDefaults returns c with its zero fields set to their defaults, or
// an error naming the first invalid field.
func (c Config) WithDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.N, 100_000)
	def(&c.Payload, 100)
	def(&c.Concurrency, 50)
	def(&c.Batch, 100)
	def(&c.Rate, 2000)
	defD(&c.Duration, 5*time.Second)
	def(&c.Timers, 10_000)
	defD(&c.Window, 2*time.Second)
	defD(&c.Idle, 5*time.Second)
	def(&c.Pools, 200)
	def(&c.Split, 20)
	def(&c.Groups, min(1000, c.N))
	defD(&c.Timeout, 5*time.Minute)
	switch {
	case c.N < 1:
		return c, fmt.Errorf("n %d: want at least 1", c.N)
	case c.Payload < 8 || c.Payload > 1<<20:
		return c, fmt.Errorf("payload %d: want 8 to 1048576 bytes", c.Payload)
	case c.Concurrency < 1:
		return c, fmt.Errorf("concurrency %d: want at least 1", c.Concurrency)
	case c.Batch < 1 || c.Batch > 10_000:
		return c, fmt.Errorf("batch %d: want 1 to 10000", c.Batch)
	case c.Rate < 1 || c.Rate > 1_000_000:
		return c, fmt.Errorf("rate %d: want 1 to 1000000 jobs/s", c.Rate)
	case c.Duration < 100*time.Millisecond:
		return c, fmt.Errorf("duration %s: want at least 100ms", c.Duration)
	case c.Timers < 1:
		return c, fmt.Errorf("timers %d: want at least 1", c.Timers)
	case c.Window < 0:
		return c, fmt.Errorf("window %s: negative", c.Window)
	case c.Idle < 100*time.Millisecond:
		return c, fmt.Errorf("idle %s: want at least 100ms", c.Idle)
	case c.Pools < 1 || c.Pools > 10_000:
		return c, fmt.Errorf("pools %d: want 1 to 10000", c.Pools)
	case c.Split < 1 || c.Split > 1000:
		return c, fmt.Errorf("split %d: want 1 to 1000", c.Split)
	case c.Groups < 1 || c.Groups > c.N:
		return c, fmt.Errorf("groups %d: want 1 to n (%d)", c.Groups, c.N)
	case c.Timeout <= 0:
		return c, fmt.Errorf("timeout %s: want a positive duration", c.Timeout)
	case c.Partitions < 0 || c.Partitions == 1 || c.Partitions > shard.MaxPartitions:
		return c, fmt.Errorf("partitions %d: want 2 to %d (0: %d)", c.Partitions, shard.MaxPartitions, DefaultPartitions)
	}
	return c, nil
}

// Env is what the workloads of one run share: the server, the run's key
// prefix and the sizes.
type Env struct {
	// Redis is the client targets and baselines use.
	Redis redis.UniversalClient
	// Options made Redis; the idle workload makes a client of its own
	// from them.
	Options *redis.UniversalOptions
	// Prefix starts every key of the run (Prefix:...), deleted by Close.
	Prefix string
	Cfg    Config
	// Progress receives the progress line; nil for none.
	Progress io.Writer

	base time.Time // timestamps in payloads count from it (monotonic)
	seq  atomic.Int64
}

// NewEnv connects to Redis and checks that no key of the server starts
// with prefix, so that Close deletes only what the run wrote.
func NewEnv(ctx context.Context, opts *redis.UniversalOptions, prefix string, cfg Config, progress io.Writer) (*Env, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if prefix == "" {
		return nil, errors.New("benchkit: empty prefix")
	}
	rdb := redis.NewUniversalClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("benchkit: redis at %v: %w", opts.Addrs, err)
	}
	taken, err := anyKeyAnywhere(ctx, rdb, prefix+":*")
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	if taken {
		_ = rdb.Close()
		return nil, fmt.Errorf("benchkit: keys under %s:* exist already; choose another prefix (the run deletes its keys at the end)", prefix)
	}
	return &Env{Redis: rdb, Options: opts, Prefix: prefix, Cfg: cfg, Progress: progress, base: time.Now()}, nil
}

// anyKeyAnywhere is AnyKey on every master of a cluster: a cluster
// client's SCAN reads one node.
func anyKeyAnywhere(ctx context.Context, rdb redis.UniversalClient, pattern string) (bool, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return AnyKey(ctx, rdb, pattern)
	}
	var taken atomic.Bool
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		found, err := AnyKey(ctx, n, pattern)
		if found {
			taken.Store(true)
		}
		return err
	})
	return taken.Load(), err
}

// Close deletes every key under the run's prefix and closes the client.
func (e *Env) Close(ctx context.Context) error {
	err := DeleteKeys(ctx, e.Redis, e.Prefix+":*")
	return errors.Join(err, e.Redis.Close())
}

// Namespace returns a key prefix (or queue name) under the run's prefix
// that no other target of the run uses.
func (e *Env) Namespace(workload, system string) string {
	return fmt.Sprintf("%s:%s-%s-%d", e.Prefix, workload, system, e.seq.Add(1))
}

// stamp returns the time since the run's start in nanoseconds: what a
// payload carries. It is never 0 (0 marks a warm-up job).
func (e *Env) stamp(t time.Time) int64 { return max(int64(t.Sub(e.base)), 1) }

// payload returns a payload of the configured size carrying stamp.
func (e *Env) payload(stamp int64) []byte {
	p := make([]byte, e.Cfg.Payload)
	putStamp(p, stamp)
	return p
}

func putStamp(p []byte, v int64) {
	for i := range 8 {
		p[i] = byte(uint64(v) >> (56 - 8*i))
	}
}

func getStamp(p []byte) int64 {
	if len(p) < 8 {
		return 0
	}
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(p[i])
	}
	return int64(v)
}

// sinceStamp returns how long ago (by the run's monotonic clock) stamp was.
func (e *Env) sinceStamp(now time.Time, stamp int64) time.Duration {
	return time.Duration(int64(now.Sub(e.base)) - stamp)
}

// progress prints "\r<label>: done/total (rate)" (or the seconds elapsed,
// when total is 0) on e.Progress every 250ms until the returned stop is
// called, which clears the line. The \r keeps it one line on a terminal.
func (e *Env) progress(label string, total int, done *atomic.Int64) (stop func()) {
	if e.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintf(e.Progress, "\r%-78s\r", "")
				return
			case <-tick.C:
				line := fmt.Sprintf("%s: %.0fs", label, time.Since(t0).Seconds())
				if total > 0 {
					n := done.Load()
					line = fmt.Sprintf("%s: %d/%d (%.0f/s)", label, n, total, float64(n)/time.Since(t0).Seconds())
				}
				fmt.Fprintf(e.Progress, "\r%-78s", line)
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// tally counts handled jobs and tells waiters when a count is reached.
type tally struct {
	n     atomic.Int64
	nwait atomic.Int64
	mu    sync.Mutex
	waits map[int64]chan struct{}
}

func (t *tally) add() {
	v := t.n.Add(1)
	if t.nwait.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, ch := range t.waits {
		if v >= k {
			close(ch)
			delete(t.waits, k)
			t.nwait.Add(-1)
		}
	}
}

// reached returns a channel closed once the count is at least k.
func (t *tally) reached(k int64) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	t.nwait.Add(1)
	if t.n.Load() >= k {
		t.nwait.Add(-1)
		close(ch)
		return ch
	}
	if t.waits == nil {
		t.waits = map[int64]chan struct{}{}
	}
	if old, ok := t.waits[k]; ok {
		t.nwait.Add(-1)
		return old
	}
	t.waits[k] = ch
	return ch
}

// ClusterURL reports whether url names a Redis Cluster: go-redis's cluster
// URL form, a seed in the host and more in addr parameters
// (redis://host:port?addr=host:port&addr=host:port; repeat the host in an
// addr parameter to give a single seed).
func ClusterURL(url string) bool {
	u, err := neturl.Parse(url)
	return err == nil && u.Query().Has("addr")
}

// URLOptions returns the client options of a -redis URL: one server's
// (RedisOptions), or a Redis Cluster's when ClusterURL says it names one,
// with as many connections per node as RedisOptions gives the server.
func URLOptions(url string, concurrency int) (*redis.UniversalOptions, error) {
	if !ClusterURL(url) {
		return RedisOptions(url, concurrency)
	}
	o, err := redis.ParseClusterURL(url)
	if err != nil {
		return nil, fmt.Errorf("benchkit: redis cluster URL: %w", err)
	}
	return &redis.UniversalOptions{
		Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		PoolSize: max(64, concurrency+16), IsClusterMode: true,
	}, nil
}

// Start connects to the Redis (or Redis Cluster, see URLOptions) at
// redisURL and returns the Env of one bench run under prefix (a new random
// one when empty), the Report it fills (the machine, Go and Redis
// versions, cfg) and a func that deletes the run's keys and closes the
// connection, joining its error to *errp.
func Start(ctx context.Context, redisURL, prefix string, cfg Config, progress io.Writer) (*Env, Report, func(errp *error), error) {
	if prefix == "" {
		prefix = RandomPrefix()
	}
	opts, err := URLOptions(redisURL, cfg.Concurrency)
	if err != nil {
		return nil, Report{}, nil, err
	}
	env, err := NewEnv(ctx, opts, prefix, cfg, progress)
	if err != nil {
		return nil, Report{}, nil, err
	}
	done := func(errp *error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		*errp = errors.Join(*errp, env.Close(cctx))
	}
	version, err := ServerVersion(ctx, env.Redis)
	if err != nil {
		done(&err)
		return nil, Report{}, nil, err
	}
	rep := Report{
		Started: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), RedisVersion: version, RedisAddr: opts.Addrs[0], Config: cfg,
	}
	rep.Config.Partitions = cfg.partitions()
	return env, rep, done, nil
}
