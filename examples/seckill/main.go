// Command seckill is a flash sale on Conveyor: many buyers, few items, and
// every order written to a SQL database exactly once.
//
//	go run ./examples/seckill            # the story: five buyers and 40 bots, three items
//	go run ./examples/seckill -load      # 10,000 concurrent buyers, 100 items, a report
//
// A buy request passes a front door (per-IP and per-user limits,
// middleware.RateLimit) and a gate: one Lua script that refuses a second
// order of the same user, refuses when the stock is gone, or else takes a
// unit and enqueues the order job on the stream driver, all in one atomic
// step. A worker pool writes the orders into the database, idempotently;
// each written order gets a payment timer (package delay) that cancels it
// and gives its unit back unless the buyer pays first.
//
// Redis: REDIS_URL, else 127.0.0.1:6379, else an embedded in-memory Redis
// (with a loud warning). Database: PostgreSQL when DATABASE_URL is set
// (postgres://user:pass@host:5432/db), else a SQLite file in a temporary
// directory (pure Go, no set-up), removed at the end. The run deletes its
// Redis keys and its rows when it ends (-keep-orders keeps the rows).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/examples/internal/devredis"
)

// envDatabaseURL selects PostgreSQL.
const envDatabaseURL = "DATABASE_URL"

func main() {
	var cfg config
	flag.BoolVar(&cfg.Load, "load", false, "load-generator mode: many concurrent buyers, then a report")
	flag.IntVar(&cfg.Buyers, "buyers", 0, "buyers in -load mode (default 10000)")
	flag.IntVar(&cfg.Items, "items", 0, "items on sale (default 3, or 100 with -load)")
	flag.IntVar(&cfg.Concurrency, "concurrency", 0, "buyers at once in -load mode (default 200)")
	flag.Float64Var(&cfg.PayFraction, "pay", 0, "fraction of the orders paid in -load mode (default 0.7; negative: none)")
	flag.DurationVar(&cfg.PaymentWindow, "window", 0, "payment window of an order (default 1s, or 5s with -load)")
	flag.IntVar(&cfg.WritesPerSecond, "writes", 0, "order writes per second across the consumers (default 50)")
	flag.BoolVar(&cfg.KeepOrders, "keep-orders", false, "keep the sale's rows in the database")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Out = os.Stdout
	if err := mainWith(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

func mainWith(ctx context.Context, cfg config) error {
	rdb, cleanup, err := devredis.Connect(ctx, cfg.Logger)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.Redis = rdb
	cfg.DatabaseURL = os.Getenv(envDatabaseURL)
	if cfg.DatabaseURL == "" {
		dir, err := os.MkdirTemp("", "seckill-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.SQLitePath = filepath.Join(dir, "orders.db")
	}
	_, err = run(ctx, cfg)
	return err
}

// config is what run needs; main fills it from flags, tests directly.
type config struct {
	// Redis holds the queue, the stock and the limits. Required.
	Redis redis.UniversalClient
	// DatabaseURL, when set, is the PostgreSQL database the orders go to.
	DatabaseURL string
	// SQLitePath is the SQLite file the orders go to when DatabaseURL is
	// empty. Required then.
	SQLitePath string
	// Out receives the story or the report. Defaults to io.Discard.
	Out io.Writer
	// Logger receives the pool's and the driver's logs. Defaults to
	// discarding them.
	Logger *slog.Logger
	// Prefix starts every Redis key of the run; they are all deleted at the
	// end. Defaults to "seckill-<unique run ID>".
	Prefix string
	// Sale names the sale: its keys and its rows. Defaults to the run ID.
	Sale string

	// Load runs the load generator instead of the story.
	Load bool
	// Items is the stock. Defaults to 3, or 100 with Load.
	Items int
	// Buyers is how many distinct users buy in Load mode. Defaults to 10,000.
	Buyers int
	// Concurrency is how many buyers send requests at once in Load mode.
	// Defaults to 200.
	Concurrency int
	// BuyersPerIP is how many buyers share an IP address in Load mode.
	// Defaults to 4.
	BuyersPerIP int
	// HotIPEvery puts one buyer in HotIPEvery behind one shared address (a
	// bot farm, a big NAT) in Load mode, where the per-IP limit stops them.
	// Defaults to 50; negative: none.
	HotIPEvery int
	// RepeatEvery makes one buyer in RepeatEvery click three times in Load
	// mode: the second click finds their order (duplicate user), the third
	// hits the per-user limit. Defaults to 10; negative: none.
	RepeatEvery int
	// IPLimit and UserLimit are the front door's limits: requests per
	// LimitPeriod from one IP address, from one user. Default to 30 and 2.
	IPLimit, UserLimit int
	// LimitPeriod is the front door's window. Defaults to 1 minute.
	LimitPeriod time.Duration
	// PayFraction is the fraction of the orders paid in Load mode, the
	// oldest first; the others time out. Defaults to 0.7; negative: none.
	PayFraction float64
	// PaymentWindow is how long an order waits for its payment once
	// written. In Load mode, a window that ends while buyers still rush
	// (a slow Redis, many buyers) puts the unit of an unpaid order back on
	// sale, where it is sold again: more orders than items, which the
	// report counts. Defaults to 1s, or 5s with Load.
	PaymentWindow time.Duration
	// NoTimeoutWait ends a Load run once the payments are made, without
	// waiting for the unpaid orders to time out; their timers are deleted
	// with the run's keys.
	NoTimeoutWait bool

	// NoConsumer runs no order consumer in this process: others do.
	NoConsumer bool
	// Workers is the consumer's concurrency. Defaults to 8.
	Workers int
	// WritesPerSecond caps the order writes of all consumers together.
	// Defaults to 50.
	WritesPerSecond int
	// VisibilityTimeout is the consumer's lease: how soon an order whose
	// consumer died is taken over. Defaults to 30s.
	VisibilityTimeout time.Duration
	// IdempotencyLease is how long a dead consumer's claim on an order
	// blocks the order's next run. Defaults to 30s.
	IdempotencyLease time.Duration
	// OrderRetention is how long a settled order's state stays in Redis.
	// Defaults to 24h.
	OrderRetention time.Duration
	// Timeout bounds each wait of the run (orders written, timers fired).
	// Defaults to 60s.
	Timeout time.Duration
	// KeepOrders keeps the sale's rows in the database at the end.
	KeepOrders bool

	// afterWrite, when set, is called by the consumer after it wrote an
	// order's row, before it schedules the timer (a test hook).
	afterWrite func(ctx context.Context, order string)
	// beforeBuyer, when set, is called in Load mode before buyer i sends
	// its requests; an error ends the rush (a test hook).
	beforeBuyer func(ctx context.Context, i int) error
}

func (c config) withDefaults() (config, error) {
	if c.Redis == nil {
		return c, errors.New("config: no Redis")
	}
	if c.DatabaseURL == "" && c.SQLitePath == "" {
		return c, errors.New("config: no database: set DatabaseURL or SQLitePath")
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	if c.Prefix == "" {
		c.Prefix = "seckill-" + runID
	}
	if c.Sale == "" {
		c.Sale = runID
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Load {
		def(&c.Items, 100)
	} else {
		def(&c.Items, 3)
	}
	def(&c.Buyers, 10_000)
	def(&c.Concurrency, 200)
	def(&c.BuyersPerIP, 4)
	def(&c.HotIPEvery, 50)
	def(&c.RepeatEvery, 10)
	def(&c.IPLimit, 30)
	def(&c.UserLimit, 2)
	def(&c.Workers, 8)
	def(&c.WritesPerSecond, 50)
	if c.LimitPeriod == 0 {
		c.LimitPeriod = time.Minute
	}
	if c.PayFraction == 0 {
		c.PayFraction = 0.7
	}
	if c.PaymentWindow == 0 {
		c.PaymentWindow = time.Second
		if c.Load {
			c.PaymentWindow = 5 * time.Second
		}
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = 30 * time.Second
	}
	if c.IdempotencyLease == 0 {
		c.IdempotencyLease = 30 * time.Second
	}
	if c.OrderRetention == 0 {
		c.OrderRetention = 24 * time.Hour
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	switch {
	case c.Items < 1 || c.Buyers < 1 || c.Concurrency < 1 || c.BuyersPerIP < 1 || c.Workers < 1:
		return c, errors.New("config: Items, Buyers, Concurrency, BuyersPerIP and Workers must be positive")
	case c.PayFraction > 1:
		return c, errors.New("config: PayFraction over 1")
	case c.PaymentWindow < time.Millisecond:
		return c, errors.New("config: PaymentWindow under 1ms")
	}
	return c, nil
}

// app is one process's hold on the sale: the queue, the shop's Redis side
// and the order database.
type app struct {
	cfg    config
	rdb    redis.UniversalClient
	d      *stream.Driver
	client *conveyor.Client
	shop   *shop
	store  *orderStore
	door   *frontDoor
	insp   *conveyor.Inspector
	// postponed counts the order writes this process's write limiter
	// postponed.
	postponed atomic.Int64
}

func newApp(ctx context.Context, cfg config) (*app, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d, err := stream.New(cfg.Redis, &stream.Config{Prefix: cfg.Prefix, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		return nil, err
	}
	s, err := newShop(cfg.Redis, d, client, cfg.Prefix, cfg.OrderRetention)
	if err != nil {
		return nil, err
	}
	door, err := newFrontDoor(cfg.Redis, cfg.Prefix, cfg.IPLimit, cfg.UserLimit, cfg.LimitPeriod)
	if err != nil {
		return nil, err
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, cfg.DatabaseURL, cfg.SQLitePath)
	if err != nil {
		return nil, err
	}
	return &app{cfg: cfg, rdb: cfg.Redis, d: d, client: client, shop: s, store: store, door: door, insp: insp}, nil
}

// run plays the story, or the load test with cfg.Load, and cleans up. The
// report is nil for the story.
func run(ctx context.Context, cfg config) (_ *report, err error) {
	a, err := newApp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg = a.cfg
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if !cfg.KeepOrders {
			if derr := a.store.deleteSale(cctx, cfg.Sale); derr != nil && err == nil {
				err = derr
			}
		}
		if derr := deleteKeys(cctx, cfg.Redis, cfg.Prefix); derr != nil && err == nil {
			err = fmt.Errorf("delete keys: %w", derr)
		}
		if cerr := a.store.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if !cfg.NoConsumer {
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.consume(cctx) }()
		defer func() {
			stop()
			if cerr := <-done; cerr != nil && err == nil {
				err = fmt.Errorf("consumer: %w", cerr)
			}
		}()
	}
	if !cfg.Load {
		return nil, a.story(ctx)
	}
	rep, err := a.load(ctx)
	if err != nil {
		return rep, err
	}
	rep.print(cfg.Out)
	if bad := rep.violations(); len(bad) > 0 {
		return rep, fmt.Errorf("invariants broken: %v", bad)
	}
	return rep, nil
}

// waitFor polls cond every 20ms until it holds, ctx ends, or d passes; what
// names the condition in the error.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%s: not within %v", what, d)
		case <-tick.C:
		}
	}
}
