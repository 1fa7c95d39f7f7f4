package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisacl"
)

// aclCommands are the commands of each driver's least-privilege ACL, with
// the key pattern ~<prefix>:* and the channel pattern &<prefix>:*: what a
// producer (conveyor.Client) and a worker pool (with its promoter) send,
// directly or from the scripts (chaos -acl-discover prints what they send,
// from MONITOR), and what the driver's discard-list and Inspector methods
// add, which Driver.Check asks for too. Left out: go-redis's HELLO and
// CLIENT SETINFO (it goes on without them), INFO and CONFIG GET (Check
// reads the version and maxmemory-policy with them when it may; see
// tolerated).
var aclCommands = map[string][]string{
	"list": {
		// Sent directly: Check, scripts, the idle wait (and its wake
		// signal), plain enqueues, the queue registry, the promoter's
		// wake-ups.
		"ping", "evalsha", "eval", "bzpopmin", "lpush", "sadd", "subscribe",
		// Called by the scripts (enqueue, fetch, ack, extend, retry,
		// release, discard, reap, the timer and discard-list scripts).
		"time", "llen", "rpop", "rpush", "lindex", "ltrim", "zadd", "zrem", "zcard", "zrange",
		"zrangebyscore", "zscore", "zmscore", "hset", "hmget", "hdel", "hincrby", "set", "incrby", "publish",
		// The record of reclaimed receipts (fetch and reap trim it and let
		// it expire).
		"zremrangebyscore", "zremrangebyrank", "pexpire",
		// The keeper's election renews its lease (internal/elect).
		"getex",
		// A lost fetch's hand-back scans the inflight HASH.
		"hscan",
		// Discard re-drive and purge, the Inspector, unique keys' and
		// cron's reads.
		"hget", "get", "lrange", "lpos", "lset", "lrem", "sscan",
		// The worker registry (internal/workers): a pool's beats.
		"srem", "del",
		// The pause key, read first by fetch.lua; the marks of cancelled
		// jobs, read by extend and reclaims.
		"exists",
		// A job cancel: the in-flight delivery it marks.
		"hexists",
		// Records of finished jobs (internal/records): their retention and
		// reads. Check asks for them, though no chaos pool keeps records.
		"zpopmin", "zcount", "hsetnx",
		// FIFO groups (internal/groups): their lines, and the conversion
		// of lines stored in the older format.
		"zrangebylex", "zrevrangebylex", "zremrangebylex", "hlen",
		// Concurrency limits (internal/limits): fetch reads them; their
		// lines.
		"hgetall", "zlexcount",
		// The queue's history (internal/history), sampled by its keeper.
		"xadd", "xrevrange",
	},
	"stream": {
		"ping", "evalsha", "eval", "xadd", "xreadgroup", "xread", "exists", "xgroup|create", "sadd", "subscribe",
		"time", "del", "xack", "xdel", "xlen", "xpending", "xrange", "xclaim", "xautoclaim", "xgroup|delconsumer", "xinfo|consumers",
		"lpush", "rpop", "lindex", "ltrim", "zadd", "zrem", "zcard", "zrange", "zrangebyscore", "zscore",
		"hset", "hmget", "hdel", "hincrby", "set", "incrby", "publish",
		// The record of reclaimed leases (fetch trims it and lets it expire).
		"zremrangebyscore", "zremrangebyrank", "pexpire",
		// The keeper's election renews its lease (internal/elect).
		"getex",
		// The marks of cancelled jobs, read by extend, requeue and takeovers.
		"zmscore",
		"hget", "get", "llen", "lrange", "lpos", "lset", "lrem", "sscan", "xinfo|groups",
		// The worker registry (internal/workers): a pool's beats.
		"srem",
		// Kept consumers' and the keeper election's sleeps (internal/wake),
		// the keeper's look for unread entries.
		"bzpopmin", "xrevrange",
		// Records of finished jobs (internal/records): their retention and
		// reads. Check asks for them, though no chaos pool keeps records.
		"zpopmin", "zcount", "hsetnx",
		// FIFO groups (internal/groups): the job index and their lines,
		// and the conversion of lines stored in the older format.
		"hexists", "zrangebylex", "zrevrangebylex", "zremrangebylex", "hlen",
		// Concurrency limits (internal/limits): fetch reads them; their
		// lines.
		"hgetall", "zlexcount",
	},
}

// tolerated are the ACL LOG entries of refusals the drivers expect and go
// on after: Check's INFO, CONFIG GET (which would also show a
// least-privilege user the server's secrets) and ACL WHOAMI.
var tolerated = map[string]bool{"command:info": true, "command:config|get": true, "command:acl|whoami": true}

// aclRules is the least-privilege ACL of driver for keys under prefix.
func aclRules(driver, prefix string) []string {
	r := redisacl.Patterns(prefix)
	for _, c := range aclCommands[driver] {
		r = append(r, "+"+c)
	}
	return r
}

// setUser creates (or resets) ACL user name with password pass and rules.
func setUser(ctx context.Context, admin *redis.Client, name, pass string, rules []string) error {
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + pass}
	for _, r := range rules {
		args = append(args, r)
	}
	return admin.Do(ctx, args...).Err()
}

// aclLoad is the work of the ACL scenario: every path a worker takes
// (fetch, ack, heartbeat, retry, discard, promotion, recovery after a kill).
func (h *harness) aclLoad() load {
	l := h.baseLoad()
	l.jobs, l.workers, l.longJobs, l.discards, l.delayShare, l.failShare = 150, 2, 2, 3, 0.2, 0.1
	if !h.short {
		l.jobs = 600
	}
	return l
}

// exercise runs the ACL load on e: workers, producers, one worker killed
// mid-way (so that its jobs are recovered), and a drain.
func exercise(ctx context.Context, e *env) *verdict {
	return standard(ctx, e, rules{explains: map[string]bool{"kill": true}}, func(ctx context.Context, produced <-chan struct{}) {
		select {
		case <-time.After(e.load.produceFor / 2): // the kill's moment
		case <-ctx.Done():
			return
		}
		if ws := e.liveWorkers(); len(ws) > 0 {
			e.replace(ctx, ws[0])
		}
	})
}

// aclScenario asks Driver.Check as the ACL user docs/redis-keys.md gives
// operators (redisacl.LeastPrivilege) and as the least-privilege user of
// aclCommands: both must pass.
// It runs the ACL load as the least-privilege user, which must work with
// nothing refused. And it asks Driver.Check as users each missing one
// permission of it: Check must fail and name what is missing.
func aclScenario(ctx context.Context, h *harness, driver string) *verdict {
	const pass = "chaos-pass"
	e, err := h.newEnv(ctx, "acl", driver, h.aclLoad(), nil)
	if err != nil {
		return failed("acl", driver, "%v", err)
	}
	defer e.close()
	admin := adminClient(e.redis.Addr())
	defer admin.Close()
	minimal := aclRules(driver, e.prefix)
	if len(aclCommands[driver]) == 0 {
		return failed("acl", driver, "no least-privilege command list for driver %s", driver)
	}
	check := func(user string, rules []string) error {
		if err := setUser(ctx, admin, user, pass, rules); err != nil {
			return fmt.Errorf("ACL SETUSER: %w", err)
		}
		return checkAs(ctx, e, driver, user, pass)
	}

	// The checks first: the documented and the minimal user must pass, each
	// narrower one fail.
	docErr := check("chaos-doc", redisacl.LeastPrivilege(e.prefix))
	minErr := check("chaos-min", minimal)
	var passedWithout, unnamed []string
	refused := 0
	for i, item := range minimal {
		narrow := append(append([]string{}, minimal[:i]...), minimal[i+1:]...)
		err := check("chaos-narrow", narrow)
		switch {
		case err == nil:
			passedWithout = append(passedWithout, item)
		case !names(err, item):
			refused++
			unnamed = append(unnamed, fmt.Sprintf("%s (%q)", item, err))
		default:
			refused++
		}
	}
	_ = admin.Do(ctx, "ACL", "DELUSER", "chaos-narrow", "chaos-doc").Err()
	_ = admin.Do(ctx, "ACL", "LOG", "RESET").Err()

	e.user, e.pass = "chaos-min", pass
	v := exercise(ctx, e)
	denied := aclDenials(ctx, admin)

	ok := map[bool]string{true: "ok", false: "refused"}
	v.facts = append(v.facts, fmt.Sprintf("check_doc=%s check_min=%s check_refused=%d/%d check_named=%d/%d",
		ok[docErr == nil], ok[minErr == nil], refused, len(minimal), refused-len(unnamed), len(minimal)))
	if docErr != nil {
		v.problems = append(v.problems, "Check refused the user docs/redis-keys.md gives")
		v.notes = append(v.notes, fmt.Sprintf("Check as the documented user: %v", docErr))
	}
	if minErr != nil {
		v.problems = append(v.problems, "Check refused the least-privilege user")
		v.notes = append(v.notes, fmt.Sprintf("Check as the least-privilege user: %v", minErr))
	}
	if len(denied) > 0 {
		v.problems = append(v.problems, "the least-privilege user was denied: "+strings.Join(denied, ", "))
	}
	if len(passedWithout) > 0 {
		v.problems = append(v.problems, "Check passed without "+strings.Join(passedWithout, " "))
	}
	if len(unnamed) > 0 {
		v.problems = append(v.problems, fmt.Sprintf("Check refused %d narrow users without naming what they miss", len(unnamed)))
		for _, u := range unnamed {
			v.notes = append(v.notes, "Check without "+u)
		}
	}
	return v
}

// checkAs runs Driver.Check as user.
func checkAs(ctx context.Context, e *env, driver, user, pass string) error {
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr(), Username: user, Password: pass})
	defer rdb.Close()
	d, err := newDriver(driver, rdb, e.prefix, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return d.Check(ctx)
}

// names reports whether err names the permission item: the command of
// "+cmd" (or "+cmd|sub"), "key" for the key pattern, "channel" for the
// channel pattern.
func names(err error, item string) bool {
	msg := strings.ToLower(err.Error())
	switch item[0] {
	case '~':
		return strings.Contains(msg, "key")
	case '&':
		return strings.Contains(msg, "channel")
	}
	cmd := strings.ToLower(item[1:])
	return strings.Contains(msg, cmd) || strings.Contains(msg, strings.ReplaceAll(cmd, "|", " "))
}

// aclDenials reads ACL LOG: what the server refused, as "reason:object".
func aclDenials(ctx context.Context, admin *redis.Client) []string {
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		return []string{"ACL LOG: " + err.Error()}
	}
	seen := map[string]bool{}
	var out []string
	for _, en := range entries {
		m := map[string]string{}
		switch x := en.(type) {
		case map[any]any:
			for k, v := range x {
				m[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any:
			for i := 0; i+1 < len(x); i += 2 {
				m[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
			}
		}
		if m["username"] != "chaos-min" || tolerated[m["reason"]+":"+m["object"]] {
			continue
		}
		s := m["reason"] + ":" + m["object"]
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// monitor records the commands a Redis server runs (MONITOR), apart from
// those of the connections in skip.
type monitor struct {
	conn net.Conn
	mu   sync.Mutex
	seen map[string]int // "CMD" or "CMD|SUB", " (lua)" when from a script
	skip func(addr string) bool
	done chan struct{}
}

// containers are the commands whose first argument is a subcommand.
var containers = map[string]bool{"CLIENT": true, "SCRIPT": true, "XGROUP": true, "XINFO": true, "CONFIG": true, "ACL": true, "OBJECT": true, "COMMAND": true, "FUNCTION": true, "MEMORY": true}

func startMonitor(addr string, skip func(string) bool) (*monitor, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		_ = c.Close()
		return nil, err
	}
	m := &monitor{conn: c, seen: map[string]int{}, skip: skip, done: make(chan struct{})}
	go m.read()
	return m, nil
}

func (m *monitor) read() {
	defer close(m.done)
	sc := bufio.NewScanner(m.conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "+")
		// 1700000000.123456 [0 127.0.0.1:5555] "evalsha" "..." ...
		open, close := strings.Index(line, "["), strings.Index(line, "] ")
		if open < 0 || close < open {
			continue
		}
		src := line[open+1 : close]
		if _, a, ok := strings.Cut(src, " "); ok && a != "lua" && m.skip(a) {
			continue
		}
		args := quoted(line[close+2:], 2)
		if len(args) == 0 {
			continue
		}
		cmd := strings.ToUpper(args[0])
		if containers[cmd] && len(args) > 1 {
			cmd += "|" + strings.ToUpper(args[1])
		}
		if strings.HasSuffix(src, " lua") {
			cmd += " (lua)"
		}
		m.mu.Lock()
		m.seen[cmd]++
		m.mu.Unlock()
	}
}

// quoted returns the first n "..." tokens of s.
func quoted(s string, n int) []string {
	var out []string
	for len(out) < n {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		s = s[i+1:]
		j := 0
		for j < len(s) && s[j] != '"' {
			if s[j] == '\\' {
				j++
			}
			j++
		}
		if j > len(s) {
			break
		}
		out = append(out, s[:j])
		if j+1 > len(s) {
			break
		}
		s = s[j+1:]
	}
	return out
}

func (m *monitor) stop() map[string]int {
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen
}

// discoverACL runs the ACL load on each driver as a user allowed
// everything, under MONITOR, and prints the commands the drivers sent.
func discoverACL(ctx context.Context, h *harness, drivers []string) int {
	rc := 0
	for _, d := range drivers {
		e, err := h.newEnv(ctx, "acl-discover", d, h.aclLoad(), nil)
		if err != nil {
			fmt.Println("chaos:", err)
			return 1
		}
		// The harness's own reads go through admin: leave its connections out.
		var mu sync.Mutex
		mine := map[string]bool{}
		_ = e.admin.Close()
		e.admin = redis.NewClient(&redis.Options{Addr: e.redis.Addr(), MaxRetries: -1,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					mu.Lock()
					mine[c.LocalAddr().String()] = true
					mu.Unlock()
				}
				return c, err
			}})
		if err := setUser(ctx, e.admin, "chaos-all", "pw", []string{"~*", "&*", "+@all"}); err != nil {
			fmt.Println("chaos:", err)
			return 1
		}
		mon, err := startMonitor(e.redis.Addr(), func(a string) bool { mu.Lock(); defer mu.Unlock(); return mine[a] })
		if err != nil {
			fmt.Println("chaos:", err)
			return 1
		}
		e.user, e.pass = "chaos-all", "pw"
		v := exercise(ctx, e)
		seen := mon.stop()
		e.close()
		fmt.Println(v.line())
		if len(v.failures()) > 0 {
			rc = 1
		}
		var cmds []string
		for c, n := range seen {
			cmds = append(cmds, fmt.Sprintf("%s=%d", c, n))
		}
		sort.Strings(cmds)
		fmt.Printf("chaos: acl-discover %s: %s\n", d, strings.Join(cmds, " "))
	}
	return rc
}
