// Command fanout shows Conveyor's pubsub driver: several worker
// processes, each subscribed to one queue, and every one of them receives
// every message published while it is subscribed.
//
//	go run ./examples/fanout
//	go run ./examples/fanout -subscribers 4 -messages 5000
//
// The program starts its subscribers as processes of its own binary, waits
// until each has its subscription confirmed by Redis, publishes price
// updates and an end marker, and prints what each subscriber received. Then
// it publishes again with nobody subscribed (the messages are gone), and
// enqueues the same messages on the list driver (they are stored, each for
// one worker): at-most-once fan-out against at-least-once jobs.
//
// It uses REDIS_URL, else a Redis on 127.0.0.1:6379, else an embedded
// in-memory Redis (with a loud warning), which the subscriber processes
// reach over loopback. It deletes its keys before it exits, and exits 1 if
// a subscriber missed a message.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/examples/internal/devredis"
	"github.com/conveyorq/conveyor/internal/keys"
)

const (
	queue      = "prices"        // the queue, so the channel <prefix>:{prices}:ch
	kindUpdate = "price.changed" // one price update
	kindEnd    = "fanout.end"    // the end of the broadcast
)

// priceUpdate is the payload of a price.changed message. Seq numbers the
// updates of one run, so a subscriber can tell what it missed.
type priceUpdate struct {
	Seq   int    `json:"seq"`
	SKU   string `json:"sku"`
	Cents int    `json:"cents"`
}

// readyTimeout bounds the wait for the subscribers to subscribe, for their
// reports, and for Redis to drop them once they have exited.
const readyTimeout = 30 * time.Second

func main() {
	if os.Getenv(childEnv) == childName {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := subscriberProcess(ctx)
		stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "fanout subscriber (pid %d): %v\n", os.Getpid(), err)
			os.Exit(1)
		}
		return
	}
	subscribers := flag.Int("subscribers", 3, "subscriber processes to start")
	messages := flag.Int("messages", 1000, "price updates to publish")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb, cleanup, err := devredis.Connect(ctx, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
	// The subscriber processes connect to the same server: the one
	// REDIS_URL names, or the one devredis found or started.
	childURL := os.Getenv(devredis.EnvURL)
	if c, ok := rdb.(*redis.Client); ok && childURL == "" {
		childURL = urlOf(c.Options())
	}
	err = run(ctx, rdb, os.Stdout, config{Subscribers: *subscribers, Messages: *messages, RedisURL: childURL})
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// config configures run.
type config struct {
	// Subscribers is how many subscriber processes to start. Defaults to 3.
	Subscribers int
	// Messages is how many price updates to publish to them. Defaults to
	// 1000.
	Messages int
	// Missed is how many updates to publish once they have left. Defaults
	// to 100.
	Missed int
	// RedisURL is the server the subscriber processes connect to: the one
	// rdb talks to. Required.
	RedisURL string
	// Prefix starts the channel's name and every key run writes. Defaults
	// to a new one per run.
	Prefix string
	// Spawn starts a subscriber process. Defaults to execSelf.
	Spawn func(env []string) (process, error)
}

func (c config) withDefaults() (config, error) {
	if c.Subscribers == 0 {
		c.Subscribers = 3
	}
	if c.Messages == 0 {
		c.Messages = 1000
	}
	if c.Missed == 0 {
		c.Missed = 100
	}
	if c.Prefix == "" {
		c.Prefix = "fanout-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if c.Spawn == nil {
		c.Spawn = execSelf
	}
	switch {
	case c.Subscribers < 1 || c.Messages < 1 || c.Missed < 1:
		return c, errors.New("subscribers, messages and missed must be at least 1")
	case c.RedisURL == "":
		return c, errors.New("no Redis URL for the subscriber processes")
	}
	return c, nil
}

// run plays the demo on rdb and prints what happens to out.
func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, cfg config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	defer cleanupKeys(context.WithoutCancel(ctx), rdb, cfg.Prefix)
	r := rendezvous(cfg.Prefix)
	d, err := pubsub.New(rdb, &pubsub.Config{Prefix: cfg.Prefix})
	if err != nil {
		return err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		return err
	}
	channel := keys.Channel(cfg.Prefix, queue)
	fmt.Fprintf(out, "fanout: publisher pid %d; starting %d subscriber processes for queue %q (channel %s)\n",
		os.Getpid(), cfg.Subscribers, queue, channel)

	procs := make([]process, 0, cfg.Subscribers)
	defer func() {
		for _, p := range procs {
			p.Kill() // those still running after an error
		}
	}()
	for i := 1; i <= cfg.Subscribers; i++ {
		p, err := cfg.Spawn(childEnvFor(cfg, strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("start subscriber %d: %w", i, err)
		}
		procs = append(procs, p)
	}
	ready, err := awaitReady(ctx, rdb, r, cfg.Subscribers)
	if err != nil {
		return err
	}
	for _, who := range ready {
		fmt.Fprintf(out, "subscriber %s: subscribed\n", who)
	}
	// Every subscriber said it is subscribed; Redis agrees.
	n, err := subscribersOf(ctx, rdb, channel)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "PUBSUB NUMSUB %s: %d\n", channel, n)
	if n != int64(cfg.Subscribers) {
		return fmt.Errorf("%d subscribers on %s, want %d", n, channel, cfg.Subscribers)
	}

	if err := publish(ctx, client, 0, cfg.Messages); err != nil {
		return err
	}
	if err := publishEnd(ctx, client); err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d price updates (#0 to #%d), then an end marker\n", cfg.Messages, cfg.Messages-1)
	tallies, err := collectTallies(ctx, rdb, r, cfg.Subscribers)
	if err != nil {
		return err
	}
	var problems []error
	for _, t := range tallies {
		fmt.Fprintln(out, t)
		if !t.exactly(0, cfg.Messages) {
			problems = append(problems, fmt.Errorf("subscriber %s did not receive exactly #0 to #%d: %v", t.Name, cfg.Messages-1, t))
		}
	}
	for i, p := range procs {
		if err := waitExit(p, 10*time.Second); err != nil {
			problems = append(problems, fmt.Errorf("subscriber process %d: %w", i+1, err))
		}
	}
	procs = nil
	fmt.Fprintf(out, "all %d subscriber processes have exited\n", cfg.Subscribers)

	// Nobody listens now. Pub/sub keeps nothing: these are gone. A process
	// that has exited may still count for a moment, until Redis has seen
	// its connection close, so wait for Redis to agree.
	if n, err = awaitNoSubscribers(ctx, rdb, channel, readyTimeout); err != nil {
		return err
	}
	if err := publish(ctx, client, cfg.Messages, cfg.Messages+cfg.Missed); err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d more price updates with %d subscribers: Redis accepted them, nobody received them, nothing stored them\n", cfg.Missed, n)

	// The same on a durable driver: stored until a worker takes each one.
	stored, err := enqueueDurably(ctx, rdb, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the same %d updates on the list driver: %d ready in Redis, each waiting for one worker (and redelivered if that worker dies)\n", cfg.Missed, stored)

	if err := errors.Join(problems...); err != nil {
		return err
	}
	fmt.Fprintf(out, "every subscriber received every message published while it was subscribed\n")
	return nil
}

// childEnvFor is the environment of subscriber name.
func childEnvFor(cfg config, name string) []string {
	return []string{childEnv + "=" + childName, nameEnv + "=" + name, redisURLEnv + "=" + cfg.RedisURL, prefixEnv + "=" + cfg.Prefix}
}

// awaitReady waits until n subscribers have said they are subscribed, and
// returns what each said ("<name> (pid <pid>)"), sorted.
func awaitReady(ctx context.Context, rdb redis.UniversalClient, r rendezvous, n int) ([]string, error) {
	got, err := popN(ctx, rdb, r.ready(), n, "subscribed")
	slices.SortFunc(got, func(a, b string) int {
		return byName(strings.Fields(a)[0], strings.Fields(b)[0])
	})
	return got, err
}

// collectTallies waits for the reports of n subscribers.
func collectTallies(ctx context.Context, rdb redis.UniversalClient, r rendezvous, n int) ([]*tally, error) {
	raw, err := popN(ctx, rdb, r.tallies(), n, "reported")
	if err != nil {
		return nil, err
	}
	out := make([]*tally, len(raw))
	for i, s := range raw {
		out[i] = &tally{}
		if err := json.Unmarshal([]byte(s), out[i]); err != nil {
			return nil, fmt.Errorf("tally %q: %w", s, err)
		}
	}
	slices.SortFunc(out, func(a, b *tally) int { return byName(a.Name, b.Name) })
	return out, nil
}

// popN takes n values from the list key, blocking for each until it comes
// or readyTimeout has passed since the call.
func popN(ctx context.Context, rdb redis.UniversalClient, key string, n int, what string) ([]string, error) {
	deadline := time.Now().Add(readyTimeout)
	var got []string
	for len(got) < n {
		wait := time.Until(deadline)
		if wait <= 0 {
			return got, fmt.Errorf("%d of %d subscribers %s within %v", len(got), n, what, readyTimeout)
		}
		kv, err := rdb.BLPop(ctx, wait, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return got, fmt.Errorf("%d of %d subscribers %s within %v", len(got), n, what, readyTimeout)
		case err != nil:
			return got, err
		}
		got = append(got, kv[1])
	}
	return got, nil
}

// byName orders subscriber names, which are numbers: 2 before 10.
func byName(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// subscribersOf asks Redis how many clients subscribe to channel.
func subscribersOf(ctx context.Context, rdb redis.UniversalClient, channel string) (int64, error) {
	m, err := rdb.PubSubNumSub(ctx, channel).Result()
	if err != nil {
		return 0, err
	}
	return m[channel], nil
}

// awaitNoSubscribers polls PUBSUB NUMSUB until nobody subscribes to channel,
// and fails when someone still does after d. It returns the last count.
func awaitNoSubscribers(ctx context.Context, rdb redis.UniversalClient, channel string, d time.Duration) (int64, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := subscribersOf(ctx, rdb, channel)
		if err != nil || n == 0 {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-deadline.C:
			return n, fmt.Errorf("%d subscribers still on %s %v after their processes exited", n, channel, d)
		case <-tick.C:
		}
	}
}

// publish sends the price updates from to to-1.
func publish(ctx context.Context, client *conveyor.Client, from, to int) error {
	reqs := make([]conveyor.Request, 0, to-from)
	for seq := from; seq < to; seq++ {
		reqs = append(reqs, conveyor.Request{Kind: kindUpdate, Args: priceUpdate{Seq: seq, SKU: "sku-" + strconv.Itoa(seq%50), Cents: 100 + seq%900}})
	}
	_, err := client.EnqueueMany(ctx, reqs...)
	return err
}

// publishEnd sends the end marker. It follows the updates on the channel:
// a subscriber receives what was published in the order Redis got it.
func publishEnd(ctx context.Context, client *conveyor.Client) error {
	_, err := client.Enqueue(ctx, kindEnd, nil, nil)
	return err
}

// enqueueDurably enqueues the missed updates on the list driver instead
// and returns how many are stored, by the Inspector.
func enqueueDurably(ctx context.Context, rdb redis.UniversalClient, cfg config) (int64, error) {
	d, err := list.New(rdb, &list.Config{Prefix: cfg.Prefix})
	if err != nil {
		return 0, err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		return 0, err
	}
	if err := publish(ctx, client, cfg.Messages, cfg.Messages+cfg.Missed); err != nil {
		return 0, err
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		return 0, err
	}
	q, err := insp.Queue(ctx, queue)
	if err != nil {
		return 0, err
	}
	return q.Ready, nil
}

// process is a running subscriber process.
type process interface {
	// Wait waits until it has exited and says how.
	Wait() error
	// Kill ends it at once if it still runs.
	Kill()
}

// waitExit waits up to timeout for p to exit, and kills it after that.
func waitExit(p process, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		p.Kill()
		<-done
		return fmt.Errorf("still running %v after the end marker; killed", timeout)
	}
}

// execSelf starts this program's binary again as a subscriber with the
// extra environment env. The child's stdin is a pipe the parent holds: it
// closes when the parent exits, however it exits, and the child then stops.
func execSelf(env []string) (process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// child is a subscriber process started by execSelf.
type child struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed once the process has exited
	err   error         // how it exited, once done is closed
}

func (c *child) Wait() error {
	<-c.done
	return c.err
}

func (c *child) Kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	<-c.done
}

// urlOf returns a redis:// URL for the server of o.
func urlOf(o *redis.Options) string {
	u := url.URL{Scheme: "redis", Host: o.Addr, Path: "/" + strconv.Itoa(o.DB)}
	if o.Username != "" || o.Password != "" {
		u.User = url.UserPassword(o.Username, o.Password)
	}
	return u.String()
}

// cleanupKeys deletes every key under prefix.
func cleanupKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
