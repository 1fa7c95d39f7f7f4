package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redisproc"
	"github.com/conveyorq/conveyor/internal/tcpproxy"
)

// load is the shape of one scenario run's work.
type load struct {
	jobs        int           // jobs to enqueue
	produceFor  time.Duration // spread over this long
	workers     int           // worker processes
	concurrency int           // per worker
	lease       time.Duration // visibility timeout
	maxMs       int           // handler time: 2..maxMs ms
	longJobs    int           // jobs running 2.5 leases (heartbeat needed)
	pad         int           // payload padding, bytes
	manyShare   float64       // share of calls that are EnqueueMany of 10
	delayShare  float64       // share of single calls with a Delay
	maxDelay    time.Duration
	failShare   float64 // share of jobs that fail once (planned retry)
	discards    int     // jobs that discard themselves
	groupShare  float64 // share of jobs put in a FIFO group (never delayed nor unique)
	groups      int     // FIFO groups they are spread over
	limit       int     // a fleet-wide concurrency limit on the queue (0: none), under workers x concurrency
	drainFor    time.Duration
}

// env is one scenario run on one driver: its Redis, its workers, its
// producers and what they reported.
type env struct {
	h       *harness
	name    string
	driver  string
	dir     string
	redis   *redisproc.Server
	admin   *redis.Client // direct, default user: the harness's reads
	prodTo  string        // where producers connect
	workTo  string        // where workers connect
	user    string
	pass    string
	prefix  string
	queue   string
	load    load
	rec     *recorder
	seq     atomic.Int64
	mu      sync.Mutex
	workers map[int]*workerProc
	nextInc int
	facts   []string
	probs   []string
	began   time.Time
	proxies []*tcpproxy.Proxy
}

// newProxy starts a proxy to the run's Redis, closed with the run.
func (e *env) newProxy() (*tcpproxy.Proxy, error) {
	p, err := tcpproxy.Start(e.redis.Addr())
	if err == nil {
		e.proxies = append(e.proxies, p)
	}
	return p, err
}

// phase logs how long the run took to reach a step, with -v.
func (e *env) phase(what string) {
	if e.h.verbose {
		fmt.Fprintf(os.Stderr, "chaos: %s %s: %s after %s\n", e.name, e.driver, what, fmtDur(time.Since(e.began)))
	}
}

func (e *env) problem(format string, args ...any) {
	e.mu.Lock()
	e.probs = append(e.probs, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// workerProc is one worker process (this binary, re-executed).
type workerProc struct {
	inc    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{} // closed when it said READY
	eof    chan struct{} // closed when its stdout is read to the end
	exited chan struct{} // closed when it has exited
	log    string
}

// newEnv starts the run's Redis (with extra server arguments and
// environment) and an admin client.
func (h *harness) newEnv(ctx context.Context, name, driver string, l load, serverEnv []string, serverArgs ...string) (*env, error) {
	began := time.Now()
	dir, err := os.MkdirTemp(h.dir, name+"-"+driver+"-")
	if err != nil {
		return nil, err
	}
	srv, err := redisproc.Start(ctx, &redisproc.Config{Bin: h.redisBin, Dir: dir, Args: serverArgs, Env: serverEnv, Keep: h.keep})
	if err != nil {
		return nil, err
	}
	e := &env{
		h: h, name: name, driver: driver, dir: dir, redis: srv, admin: adminClient(srv.Addr()),
		prodTo: srv.Addr(), workTo: srv.Addr(), prefix: "chaos", queue: "q",
		load: l, rec: newRecorder(), workers: map[int]*workerProc{}, began: began,
	}
	if l.limit > 0 {
		if err := e.setLimit(ctx, l.limit); err != nil {
			e.close()
			return nil, fmt.Errorf("set the queue's concurrency limit: %w", err)
		}
	}
	return e, nil
}

// setLimit sets a fleet-wide concurrency limit of n on the run's queue
// (docs/concurrency.md), as the default user, before anything else runs.
func (e *env) setLimit(ctx context.Context, n int) error {
	d, err := newDriver(e.driver, e.admin, e.prefix, nil)
	if err != nil {
		return err
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		return err
	}
	return insp.SetLimit(ctx, e.queue, "", n)
}

// adminClient returns a client for the harness's own reads: direct, never
// through a proxy, as the default user, without re-sends.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
}

// close stops every process the run started and removes its files (kept
// with -keep).
func (e *env) close() {
	for _, p := range e.proxies {
		p.Close()
	}
	for _, w := range e.liveWorkers() {
		e.kill(w, false)
	}
	_ = e.admin.Close()
	e.redis.Stop()
	if !e.h.keep {
		_ = os.RemoveAll(e.dir)
	}
}

// spawn starts a worker process and reads its events.
func (e *env) spawn() (*workerProc, error) {
	e.mu.Lock()
	inc := e.nextInc
	e.nextInc++
	e.mu.Unlock()
	f := workerFlags{driver: e.driver, addr: e.workTo, user: e.user, pass: e.pass, prefix: e.prefix,
		queue: e.queue, concurrency: e.load.concurrency, lease: e.load.lease}
	cmd := exec.Command(e.h.self, f.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(e.dir, "worker-"+strconv.Itoa(inc)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	_ = logf.Close() // the child has it
	w := &workerProc{inc: inc, cmd: cmd, stdin: stdin, ready: make(chan struct{}), eof: make(chan struct{}),
		exited: make(chan struct{}), log: logPath}
	e.rec.inc(inc) // known from now on
	e.mu.Lock()
	e.workers[inc] = w
	e.mu.Unlock()
	go e.read(w, stdout)
	go func() {
		<-w.eof // Wait closes the pipe: read it to the end first
		err := cmd.Wait()
		ir := e.rec.inc(inc)
		e.rec.mu.Lock()
		ir.exited, ir.exitErr = true, err
		ir.lastLogs = tailLines(w.log, 3)
		e.rec.signal()
		e.rec.mu.Unlock()
		e.mu.Lock()
		delete(e.workers, inc) // gone, whoever ended it
		e.mu.Unlock()
		close(w.exited)
	}()
	return w, nil
}

// read turns a worker's stdout into records.
func (e *env) read(w *workerProc, out io.Reader) {
	defer close(w.eof)
	sc := bufio.NewScanner(out)
	readyOnce := sync.Once{}
	for sc.Scan() {
		now := time.Now()
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		n := 0
		if len(f) > 1 {
			n, _ = strconv.Atoi(f[1])
		}
		switch {
		case f[0] == "READY":
			readyOnce.Do(func() { close(w.ready) })
		case f[0] == "S" && len(f) == 7:
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			seq, _ := strconv.Atoi(f[4])
			rec, _ := strconv.Atoi(f[5])
			att, _ := strconv.Atoi(f[6])
			e.rec.start(&runRec{inc: w.inc, r: n, startNs: ns, start: now, id: f[3], seq: seq, rec: rec, att: att})
		case f[0] == "D" && len(f) == 3:
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			e.rec.update(w.inc, n, func(r *runRec) { r.done, r.endNs = true, ns })
		case f[0] == "E" && len(f) == 3:
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			e.rec.update(w.inc, n, func(r *runRec) { r.failed, r.endNs = true, ns })
		case f[0] == "F" && len(f) == 3:
			e.rec.update(w.inc, n, func(r *runRec) { r.outcome, r.finish = f[2], now })
		}
	}
}

func tailLines(path string, n int) []string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

// startWorkers starts n workers and waits until each says READY.
func (e *env) startWorkers(ctx context.Context, n int) error {
	ws := make([]*workerProc, n)
	for i := range ws {
		w, err := e.spawn()
		if err != nil {
			return err
		}
		ws[i] = w
	}
	for _, w := range ws {
		if err := e.waitReady(ctx, w); err != nil {
			return err
		}
	}
	e.phase(fmt.Sprintf("%d workers ready", n))
	return nil
}

func (e *env) waitReady(ctx context.Context, w *workerProc) error {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-w.ready:
		return nil
	case <-w.exited:
		return fmt.Errorf("worker %d exited at start: %s", w.inc, strings.Join(tailLines(w.log, 3), " | "))
	case <-t.C:
		return fmt.Errorf("worker %d not ready within 30s", w.inc)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill SIGKILLs a worker (recorded as a kill fault when asFault is set) and
// waits until it is gone and its last lines are read.
func (e *env) kill(w *workerProc, asFault bool) {
	select {
	case <-w.exited:
		return
	default:
	}
	if asFault {
		ir := e.rec.inc(w.inc)
		e.rec.mu.Lock()
		ir.killed = time.Now()
		e.rec.mu.Unlock()
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
	if asFault {
		e.rec.addFault(fault{kind: "kill", inc: w.inc, end: time.Now()})
	}
	e.mu.Lock()
	delete(e.workers, w.inc)
	e.mu.Unlock()
}

// waitWorking waits until every running worker has started a job, so that
// faults meet pools at work rather than in their start-up check (Pool.Run
// fails at start, by design, when that check fails). Bounded: a worker that
// gets no job within 10 s is not waited for.
func (e *env) waitWorking(ctx context.Context) {
	deadline := time.After(10 * time.Second)
	for {
		changed := e.rec.changed()
		idle := false
		for _, w := range e.liveWorkers() {
			if !e.rec.hasRun(w.inc) {
				idle = true
			}
		}
		if !idle {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// replace SIGKILLs w (a kill fault) and starts a worker in its place,
// waiting until it is ready.
func (e *env) replace(ctx context.Context, w *workerProc) {
	e.kill(w, true)
	nw, err := e.spawn()
	if err == nil {
		err = e.waitReady(ctx, nw)
	}
	if err != nil {
		e.problem("replacement worker: %v", err)
	}
}

// stopWorkers asks every worker to stop (closes its stdin) and waits.
func (e *env) stopWorkers() {
	ws := e.liveWorkers()
	for _, w := range ws {
		ir := e.rec.inc(w.inc)
		e.rec.mu.Lock()
		ir.stopped = true
		e.rec.mu.Unlock()
		_ = w.stdin.Close()
	}
	for _, w := range ws {
		select {
		case <-w.exited:
		case <-time.After(20 * time.Second):
			e.problem("worker %d did not stop within 20s", w.inc)
			e.kill(w, false)
		}
		e.mu.Lock()
		delete(e.workers, w.inc)
		e.mu.Unlock()
	}
}

// liveWorkers returns the running workers, oldest first.
func (e *env) liveWorkers() []*workerProc {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ws []*workerProc
	for i := 0; i < e.nextInc; i++ {
		if w := e.workers[i]; w != nil {
			ws = append(ws, w)
		}
	}
	return ws
}

// producer returns a client for producers, as the default or the run's user.
func (e *env) producerClient() (*conveyor.Client, *redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: e.prodTo, Username: e.user, Password: e.pass})
	d, err := newDriver(e.driver, rdb, e.prefix, nil)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: e.queue})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return c, rdb, nil
}

// produce enqueues e.load.jobs jobs spread over produceFor from 4
// goroutines, recording every call, and returns when all calls are made (or
// 3 x produceFor has passed).
func (e *env) produce(ctx context.Context) error {
	c, rdb, err := e.producerClient()
	if err != nil {
		return err
	}
	defer rdb.Close()
	const producers = 4
	l := e.load
	avgJobs := 1 + 9*l.manyShare
	calls := float64(l.jobs) / avgJobs
	every := time.Duration(float64(l.produceFor) * producers / calls)
	ctx, cancel := context.WithTimeout(ctx, 3*l.produceFor+10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := newRand(p)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for int(e.seq.Load()) < l.jobs {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				e.call(ctx, c, rng, l.jobs)
			}
		}(p)
	}
	wg.Wait()
	return nil
}

// call makes one Enqueue or EnqueueMany call of the load's mix and records
// it. It returns the call's error.
func (e *env) call(ctx context.Context, c *conveyor.Client, rng *rand.Rand, limit int) error {
	l := e.load
	n := 1
	if rng.Float64() < l.manyShare {
		n = 10
	}
	first := int(e.seq.Add(int64(n))) - n
	if limit > 0 && first >= limit {
		return nil
	}
	rec := &callRec{}
	reqs := make([]conveyor.Request, n)
	for i := range reqs {
		seq := first + i
		a := jobArgs{Seq: seq, Ms: 2 + rng.IntN(max(1, l.maxMs-1))}
		if seq < l.longJobs {
			a.Ms = int(l.lease.Milliseconds() * 5 / 2)
		}
		if l.pad > 0 {
			a.Pad = strings.Repeat("x", l.pad)
		}
		p := plan{}
		if rng.Float64() < l.failShare {
			p.fail, a.Fail = 1, 1
		}
		if seq >= l.longJobs && seq < l.longJobs+l.discards {
			p.discard, a.Discard = true, true
		}
		reqs[i] = conveyor.Request{Kind: jobKind, Args: a}
		if l.groups > 0 && rng.Float64() < l.groupShare {
			p.group = "g" + strconv.Itoa(rng.IntN(l.groups))
			reqs[i].Opts = &conveyor.EnqueueOptions{Group: p.group}
		}
		e.rec.addPlan(seq, p)
		rec.seqs = append(rec.seqs, seq)
	}
	// A single job in a group is neither delayed nor unique.
	single := n == 1 && reqs[0].Opts == nil
	if single && rng.Float64() < l.delayShare {
		rec.delay = time.Duration(1+rng.Int64N(int64(l.maxDelay))) / time.Millisecond * time.Millisecond
		opts := &conveyor.EnqueueOptions{Delay: rec.delay}
		if rng.IntN(2) == 0 {
			// Unique keys take the same path on the client; half the
			// delayed jobs hold one.
			opts.UniqueKey, opts.UniqueFor = "u"+strconv.Itoa(first), time.Minute
		}
		reqs[0].Opts = opts
	} else if single && rng.IntN(10) == 0 {
		reqs[0].Opts = &conveyor.EnqueueOptions{UniqueKey: "u" + strconv.Itoa(first), UniqueFor: time.Minute}
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rec.start = time.Now()
	msgs, err := c.EnqueueMany(cctx, reqs...)
	rec.end = time.Now()
	rec.err = err
	if err == nil {
		for _, m := range msgs {
			rec.ids = append(rec.ids, m.ID)
		}
	}
	e.rec.addCall(rec)
	return err
}

// queueState reads what the queue holds (ready, in flight, delayed, waiting
// in a group or for a limit's slot), directly from its keys.
func (e *env) queueState(ctx context.Context) (left, dead int64, err error) {
	k := keys.Queue(e.prefix, e.queue)
	p := e.admin.Pipeline()
	var cmds []*redis.IntCmd
	switch e.driver {
	case "list":
		cmds = append(cmds, p.LLen(ctx, k.Part("ready")), p.ZCard(ctx, k.Part("lease")))
	case "stream":
		cmds = append(cmds, p.XLen(ctx, k.Part("stream")))
	}
	// Jobs waiting their turn in a FIFO group (internal/groups) or for a
	// concurrency limit's slot (internal/limits).
	cmds = append(cmds, p.ZCard(ctx, k.Part("delayed")), p.HLen(ctx, k.Part("group_msgs")), p.HLen(ctx, k.Part("limit_msgs")))
	deadCmd := p.LLen(ctx, k.Part("dead"))
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, err
	}
	for _, c := range cmds {
		left += c.Val()
	}
	return left, deadCmd.Val(), nil
}

// stored returns what the queue holds, ready, in flight, delayed and
// waiting in a group or for a limit's slot, as one text: the harness looks
// job IDs up in it.
func (e *env) stored(ctx context.Context) string {
	k := keys.Queue(e.prefix, e.queue)
	var b strings.Builder
	add := func(vs []string, _ error) {
		for _, v := range vs {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	add(e.admin.LRange(ctx, k.Part("ready"), 0, -1).Result())
	add(e.admin.ZRange(ctx, k.Part("lease"), 0, -1).Result())
	add(e.admin.ZRange(ctx, k.Part("delayed"), 0, -1).Result())
	add(e.admin.HVals(ctx, k.Part("timers")).Result())
	add(e.admin.HVals(ctx, k.Part("group_msgs")).Result())
	add(e.admin.HVals(ctx, k.Part("limit_msgs")).Result())
	if xs, err := e.admin.XRange(ctx, k.Part("stream"), "-", "+").Result(); err == nil {
		for _, x := range xs {
			b.WriteString(fmt.Sprint(x.Values))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// drain waits until every job whose Enqueue returned nil has run to its end
// and the queue holds nothing (ready, in flight, delayed or waiting in a
// group or for a limit's slot), polling Redis, for at most load.drainFor.
// Then it stops the workers.
func (e *env) drain(ctx context.Context) endState {
	began := time.Now()
	deadline := began.Add(e.load.drainFor)
	var st endState
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		left, _, err := e.queueState(ctx)
		if err == nil && left == 0 && e.rec.unhandled() == 0 && e.rec.running() == 0 {
			st.drained = true
			break
		}
		if err == nil && left == 0 && e.rec.running() == 0 && time.Since(began) > e.load.lease*3 {
			// Nothing left to wait for: the jobs not handled are gone.
			st.drained = true
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	st.drain = time.Since(began)
	e.phase("drained")
	e.stopWorkers()
	e.phase("workers stopped")
	left, dead, err := e.queueState(context.Background())
	if err != nil {
		e.problem("reading the queue at the end: %v", err)
	}
	st.left, st.discarded = left, dead
	if left > 0 {
		st.stored = e.stored(context.Background())
	}
	if dead > 0 {
		k := keys.Queue(e.prefix, e.queue)
		recs, _ := e.admin.LRange(context.Background(), k.Part("dead"), 0, 2).Result()
		for _, r := range recs {
			st.reasons = append(st.reasons, discardReason(r))
		}
	}
	return st
}

// discardReason reads the reason of a discard record
// "d1,<ms>,<len>:<reason><message>".
func discardReason(rec string) string {
	parts := strings.SplitN(rec, ",", 3)
	if len(parts) < 3 {
		return "?"
	}
	n, rest, ok := strings.Cut(parts[2], ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l > len(rest) {
		return "?"
	}
	return rest[:l]
}

// verdict judges the run.
func (e *env) verdict(ru rules, st endState) *verdict {
	v := judge(e.rec, ru, st)
	v.scenario, v.driver, v.limit = e.name, e.driver, e.load.limit
	e.mu.Lock()
	v.facts = append(v.facts, e.facts...)
	v.problems = append(v.problems, e.probs...)
	e.mu.Unlock()
	for _, r := range st.reasons {
		v.notes = append(v.notes, "discard reason: "+r)
	}
	if len(v.failures()) > 0 {
		v.notes = append(v.notes, workerLogSummary(e.dir)...)
	}
	return v
}

// workerLogSummary counts the distinct messages the workers logged (slog's
// msg and the start of its error), most frequent first.
func workerLogSummary(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "worker-*.log"))
	count := map[string]int{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for line := range strings.Lines(string(b)) {
			key := strings.TrimSpace(line)
			if m := logMsg.FindStringSubmatch(line); m != nil {
				key = m[1]
				if e := logErr.FindStringSubmatch(line); e != nil {
					key += ": " + e[1]
				}
			}
			if len(key) > 160 {
				key = key[:160]
			}
			count[key]++
		}
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return count[keys[i]] > count[keys[j]] })
	var out []string
	for _, k := range keys[:min(len(keys), 6)] {
		out = append(out, fmt.Sprintf("worker log: %d x %s", count[k], k))
	}
	return out
}

var (
	logMsg = regexp.MustCompile(`msg="?([^"]*?)"? [a-z_]+=`)
	logErr = regexp.MustCompile(`error="?([^"]{0,100})`)
)

// newRand returns a random source for goroutine p of a run.
func newRand(p int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(p)))
}
