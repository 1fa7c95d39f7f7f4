package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The kill test: the 10,000-buyer rush while the order consumers run in
// child processes, two of which are SIGKILLed mid-run and replaced. Each of
// them is killed while it holds an order whose row it wrote but whose job
// it did not finish (no timer, idempotency key not marked done, no ack):
// the next consumer takes the job over after its lease and runs it again,
// and the database's UNIQUE order ID turns the second write into nothing.
const (
	childPrefixEnv = "SECKILL_CHILD_PREFIX"
	childSaleEnv   = "SECKILL_CHILD_SALE"
	childSQLiteEnv = "SECKILL_CHILD_SQLITE"
	childDBURLEnv  = "SECKILL_CHILD_DATABASE_URL"
	childHangEnv   = "SECKILL_CHILD_HANG_AFTER" // hang after this many rows written; 0: never
	childSignalEnv = "SECKILL_CHILD_SIGNAL"     // LIST the child pushes the hung order to

	killLease = time.Second // the consumers' visibility timeout and idempotency lease
)

func init() { procs.Funcs["consumer"] = consumerChild }

// killConfig is the configuration the test and its consumers share.
func killConfig(prefix, sale, sqlitePath, dbURL string) config {
	return config{
		Prefix: prefix, Sale: sale, SQLitePath: sqlitePath, DatabaseURL: dbURL,
		Load: true, Buyers: 10_000, Items: 100, PaymentWindow: time.Minute,
		// A slow trickle of writes, so that the kills land mid-run.
		WritesPerSecond: 40, Workers: 8,
		VisibilityTimeout: killLease, IdempotencyLease: killLease,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// consumerChild runs an order consumer until it is stopped (stdin closed)
// or killed. With a hang count set, it stops in the handler of that
// order, after the row is written and before anything else, and tells the
// test.
func consumerChild(ctx context.Context) error {
	rdb, err := proctest.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	stdin, stop := proctest.UntilStdinCloses()
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stdin.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	cfg := killConfig(os.Getenv(childPrefixEnv), os.Getenv(childSaleEnv), os.Getenv(childSQLiteEnv), os.Getenv(childDBURLEnv))
	cfg.Redis = rdb
	hangAfter, _ := strconv.Atoi(os.Getenv(childHangEnv))
	signal := os.Getenv(childSignalEnv)
	var written atomic.Int64
	cfg.afterWrite = func(ctx context.Context, order string) {
		if hangAfter == 0 || written.Add(1) != int64(hangAfter) {
			return
		}
		if err := rdb.LPush(context.WithoutCancel(ctx), signal, order).Err(); err != nil {
			fmt.Fprintln(os.Stderr, "consumer child: signal:", err)
		}
		<-ctx.Done() // hung here until killed
	}
	a, err := newApp(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.store.close()
	if err := a.consume(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func TestConsumerKilledMidRun(t *testing.T) {
	t.Parallel()
	testKill(t, sqliteDB)
}

func TestConsumerKilledMidRunPostgres(t *testing.T) {
	t.Parallel()
	testKill(t, postgresDB(t))
}

func testKill(t *testing.T, db database) {
	ctx := testCtx(t, 2*time.Minute)
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var probe config
	db.use(t, &probe)
	cfg := killConfig(prefix, "kill-"+prefix, probe.SQLitePath, probe.DatabaseURL)
	cfg.Redis, cfg.NoConsumer = rdb, true
	a, err := newApp(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.store.deleteSale(cctx, cfg.Sale); err != nil {
			t.Error(err)
		}
		_ = a.store.close()
	})
	signal := prefix + ":test:hung"
	start := func(hangAfter int) *proctest.Child {
		return procs.Start(t, "consumer",
			childPrefixEnv+"="+prefix, childSaleEnv+"="+cfg.Sale, childSQLiteEnv+"="+cfg.SQLitePath,
			childDBURLEnv+"="+cfg.DatabaseURL, childHangEnv+"="+strconv.Itoa(hangAfter), childSignalEnv+"="+signal)
	}
	rows := func() int64 {
		sum, err := a.store.summary(ctx, cfg.Sale)
		if err != nil {
			t.Fatal(err)
		}
		return sum.Orders
	}

	began := time.Now()
	if err := a.shop.open(ctx, cfg.Sale, cfg.Items); err != nil {
		t.Fatal(err)
	}
	rep := &report{Items: cfg.Items}
	type rushed struct {
		orders []string
		err    error
	}
	rushDone := make(chan rushed, 1)
	go func() {
		orders, err := a.rush(ctx, rep)
		rushDone <- rushed{orders, err}
	}()

	// Two consumers die, each hung in the order it wrote as its 15th row;
	// a third finishes the run.
	var hung []string
	var atKill []int64
	child := start(15)
	for kill := range 2 {
		v, err := rdb.BLPop(ctx, 60*time.Second, signal).Result()
		if err != nil {
			t.Fatalf("consumer %d never hung: %v", kill+1, err)
		}
		hung = append(hung, v[1])
		child.Kill(t)
		if !child.Killed() {
			t.Fatalf("consumer %d ended by %v, not SIGKILL", kill+1, child.Err())
		}
		atKill = append(atKill, rows())
		hangAfter := 15
		if kill == 1 {
			hangAfter = 0
		}
		child = start(hangAfter)
	}
	r := <-rushDone
	if r.err != nil {
		t.Fatalf("rush: %v", r.err)
	}
	if err := a.waitAllWritten(ctx, len(r.orders)); err != nil {
		t.Fatalf("after %d kills: %v", len(atKill), err)
	}
	if err := child.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("the last consumer did not stop cleanly: %v", err)
	}
	took := time.Since(began)
	if err := a.summarize(ctx, rep); err != nil {
		t.Fatal(err)
	}

	t.Logf("%s: %d kills, rows written at each kill %v; %d orders, %d distinct users, %d left; consumers %+v; %v",
		db.name, len(atKill), atKill, rep.Orders, rep.Users, rep.Left, rep.Stats, took.Round(time.Millisecond))
	if bad := rep.violations(); len(bad) > 0 {
		t.Errorf("invariants broken: %v", bad)
	}
	if len(r.orders) != 100 || rep.Orders != 100 || rep.Users != 100 || rep.Holders != 100 || rep.Unpaid != 100 {
		t.Errorf("%d placed, %d orders (%d unpaid) for %d users in the database, %d holders in Redis; want 100 each",
			len(r.orders), rep.Orders, rep.Unpaid, rep.Users, rep.Holders)
	}
	if rep.Left != 0 || rep.MinLeft < 0 || rep.Orders+rep.Left != 100 {
		t.Errorf("stock left %d (lowest seen %d) with %d sold; want 0 and sold + left = 100", rep.Left, rep.MinLeft, rep.Orders)
	}
	for i, n := range atKill {
		if n < 15 || n >= 100 {
			t.Errorf("kill %d came with %d rows written: want mid-run (15 to 99)", i+1, n)
		}
	}
	// The hung orders were run again and found their rows. A consumer
	// killed between its insert and its counter loses a "written", which
	// the replay then counts as "replayed".
	if st := rep.Stats; st.Written > 100 || st.Written+st.Replayed < 100 || st.Replayed < 2 || st.DBRejected != 0 {
		t.Errorf("consumers: %+v; want at most 100 written, with the replays at least 100, at least the 2 hung orders replayed, none refused", st)
	}
	// Each order has one payment timer, the hung ones included.
	page, err := a.insp.Jobs(ctx, queue, conveyor.JobDelayed, &conveyor.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	timers := map[string]bool{}
	for _, j := range page.Jobs {
		timers[j.ID] = true
	}
	if page.Total != 100 || len(timers) != 100 {
		t.Errorf("%d timers pending (%d distinct), want 100", page.Total, len(timers))
	}
	for _, o := range append(hung, r.orders...) {
		if !timers[timerID(o)] {
			t.Errorf("order %s has no payment timer", o)
		}
	}
	for _, o := range hung {
		if !strings.Contains(strings.Join(r.orders, " "), o) {
			t.Errorf("hung order %s was not placed by the rush", o)
		}
	}
	if n, err := rdb.XLen(ctx, a.shop.streamKey).Result(); err != nil || n != 0 {
		t.Errorf("%d entries left in the stream (%v), want none", n, err)
	}
	if recs, _, err := a.d.ListDiscarded(ctx, queue, 0, 10); err != nil || len(recs) != 0 {
		t.Errorf("discarded: %d records (%v), want none", len(recs), err)
	}
}
