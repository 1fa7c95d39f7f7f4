// Command chaos is Conveyor's chaos suite: it breaks a real Redis, real
// worker processes and the network between them the way operators see them
// break, and checks that every promise holds. scripts/chaos.sh builds and
// runs it (make chaos, make chaos-short); docs/chaos.md describes the
// scenarios and the verdict lines.
//
// It is a program rather than a test package behind a build tag: it starts
// redis-servers, proxies and worker processes of its own and prints one
// verdict line per scenario and driver, which a go test run would bury in
// its own output and time limits; and a program is still compiled and vetted
// by go vet ./... and go build ./..., so an API change cannot leave it
// broken unnoticed, while go test ./... runs none of it (its unit tests need
// no Redis).
//
// Each scenario starts its own redis-server(s) on free loopback ports and
// stops only what it started, by PID; it never connects to any other Redis.
//
//	chaos [-short] [-runs N] [-scenarios a,b] [-drivers list,stream] [-redis-server PATH] [-skew-lib PATH]
//	chaos -acl-discover     print the commands each driver sends, for the ACL scenario's list
//	chaos worker ...        a worker process (started by chaos itself)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// harness holds what every scenario run shares.
type harness struct {
	self     string // this binary, re-executed as worker processes
	redisBin string
	skewLib  string
	dir      string
	keep     bool
	short    bool
	verbose  bool
}

// scenario runs once on one driver and returns its verdict.
type scenario struct {
	name string
	run  func(ctx context.Context, h *harness, driver string) *verdict
}

func scenarios() []scenario {
	s := []scenario{
		{"kill-workers", killWorkers},
		{"redis-restart", redisRestart},
		{"proxy", proxyCutPause},
		{"lost-reply", lostReply},
	}
	for _, off := range []time.Duration{5 * time.Second, -5 * time.Second, 60 * time.Second, -60 * time.Second} {
		s = append(s, scenario{fmt.Sprintf("clock-skew%+ds", int(off.Seconds())), clockSkew(off)})
	}
	return append(s,
		scenario{"full-redis", fullRedis},
		scenario{"acl", aclScenario},
	)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		if err := runWorker(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "chaos worker (pid %d): %v\n", os.Getpid(), err)
			os.Exit(1)
		}
		return
	}
	// go-redis logs reconnection failures on its own; the harness causes
	// them on purpose and reports what matters in its verdicts.
	redis.SetLogger(quietLogger{})
	os.Exit(run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func run() int {
	var (
		h           harness
		runs        int
		only        string
		drivers     string
		aclDiscover bool
	)
	flag.BoolVar(&h.short, "short", os.Getenv("CHAOS_SHORT") != "", "the short form of every scenario (default from CHAOS_SHORT)")
	flag.IntVar(&runs, "runs", 1, "runs of each scenario on each driver")
	flag.StringVar(&only, "scenarios", "", "comma-separated scenario names or prefixes (default: all)")
	flag.StringVar(&drivers, "drivers", "list,stream", "comma-separated drivers")
	flag.StringVar(&h.redisBin, "redis-server", "", "redis-server binary (default: $CONVEYOR_REDIS_SERVER, else redis-server on PATH)")
	flag.StringVar(&h.skewLib, "skew-lib", "", "the clock shim (scripts/chaos/skewclock.c built as a shared object); clock-skew fails without it")
	flag.StringVar(&h.dir, "dir", "", "directory for servers' files and worker logs (default: a new temporary one)")
	flag.BoolVar(&h.keep, "keep", false, "keep the files of every run (worker logs, Redis logs)")
	flag.BoolVar(&h.verbose, "v", false, "log each run's steps and their times on stderr")
	flag.BoolVar(&aclDiscover, "acl-discover", false, "print the commands each driver sends (MONITOR) and exit")
	flag.Parse()

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	h.self = self
	if h.dir == "" {
		h.dir, err = os.MkdirTemp("", "conveyor-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
		if !h.keep {
			defer os.RemoveAll(h.dir)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ds := strings.Split(drivers, ",")
	if aclDiscover {
		return discoverACL(ctx, &h, ds)
	}
	var chosen []scenario
	for _, s := range scenarios() {
		if only == "" || slices.ContainsFunc(strings.Split(only, ","), func(p string) bool { return p != "" && strings.HasPrefix(s.name, p) }) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		fmt.Fprintf(os.Stderr, "chaos: no scenario matches %q\n", only)
		return 2
	}
	began := time.Now()
	failed := map[string]int{}
	total := 0
	for _, s := range chosen {
		for _, d := range ds {
			for r := 1; r <= runs; r++ {
				if ctx.Err() != nil {
					fmt.Println("chaos: interrupted")
					return 130
				}
				t0 := time.Now()
				v := s.run(ctx, &h, d)
				if ctx.Err() != nil { // an interrupted run proves nothing
					fmt.Println("chaos: interrupted")
					return 130
				}
				v.run, v.runs, v.took = r, runs, time.Since(t0)
				fmt.Println(v.line())
				total++
				if len(v.failures()) > 0 {
					failed[s.name+" "+d]++
					for _, n := range v.notes {
						fmt.Println("    " + n)
					}
				}
			}
		}
	}
	var fs []string
	for k, n := range failed {
		fs = append(fs, fmt.Sprintf("%s (%d of %d)", k, n, runs))
	}
	sort.Strings(fs)
	if len(fs) > 0 {
		fmt.Printf("chaos: %d of %d runs failed in %s: %s\n", sumValues(failed), total, time.Since(began).Round(time.Second), strings.Join(fs, ", "))
		return 1
	}
	fmt.Printf("chaos: all %d runs passed in %s\n", total, time.Since(began).Round(time.Second))
	return 0
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
