package redisha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// sentinelCount is how many sentinels watch the master; quorum is the
// number of them that must agree it is down. Three is the smallest count
// that survives losing one, and a fail-over also needs a majority to
// elect the sentinel that runs it.
const (
	sentinelCount = 3
	quorum        = 2
)

// SentinelConfig says what StartSentinel starts. The zero value starts a
// master named "conveyor" with one replica.
type SentinelConfig struct {
	// MasterName is the name the sentinels monitor the master under.
	// Defaults to "conveyor".
	MasterName string
	// Replicas is how many replicas the master has. Defaults to 1.
	Replicas int
	// DownAfter is how long the master must not answer before a sentinel
	// thinks it down (sentinel down-after-milliseconds). A fail-over starts
	// about this long after the master dies. Defaults to 1 s.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout: an election that
	// fails is retried after twice this. Defaults to 5 s.
	FailoverTimeout time.Duration
	// Args are added to the master's and the replicas' arguments (not the
	// sentinels'), last, so they can override this package's
	// (--repl-diskless-sync-delay 0).
	Args []string
	// Bin is the redis-server binary. Defaults to redisproc.Bin's.
	Bin string
	// Dir is where each server's directory is made. Defaults to
	// os.TempDir().
	Dir string
	// StartTimeout bounds StartSentinel. Defaults to 30 s.
	StartTimeout time.Duration
	// Keep leaves the servers' directories (logs, sentinel configs) in
	// place after Close.
	Keep bool
}

func (c *SentinelConfig) withDefaults() (SentinelConfig, error) {
	var out SentinelConfig
	if c != nil {
		out = *c
	}
	switch {
	case out.Replicas < 0:
		return out, fmt.Errorf("redisha: SentinelConfig.Replicas is %d, want 1 or more (0 for the default)", out.Replicas)
	case out.DownAfter < 0 || out.FailoverTimeout < 0 || out.StartTimeout < 0:
		return out, errors.New("redisha: SentinelConfig has a negative duration")
	case strings.ContainsAny(out.MasterName, " \t\r\n\"'"):
		return out, fmt.Errorf("redisha: SentinelConfig.MasterName %q has a space or a quote", out.MasterName)
	}
	if out.MasterName == "" {
		out.MasterName = "conveyor"
	}
	if out.Replicas == 0 {
		out.Replicas = 1
	}
	if out.DownAfter == 0 {
		out.DownAfter = time.Second
	}
	if out.FailoverTimeout == 0 {
		out.FailoverTimeout = 5 * time.Second
	}
	if out.StartTimeout == 0 {
		out.StartTimeout = 30 * time.Second
	}
	if out.Bin == "" {
		bin, err := redisproc.Bin()
		if err != nil {
			return out, err
		}
		out.Bin = bin
	}
	return out, nil
}

// Sentinel is a master, its replicas and three sentinels watching it, all
// on loopback ports StartSentinel chose. Its methods are safe for
// concurrent use.
type Sentinel struct {
	cfg       SentinelConfig
	mu        sync.Mutex
	nodes     []*node // the first master, then the replicas
	sentinels []*redisproc.Server
	clients   []*redis.SentinelClient // one per sentinel
}

// StartSentinel starts a master, cfg.Replicas replicas of it and three
// sentinels, and returns once a fail-over would work: every replica is in
// sync, and every sentinel knows the master, its replicas and the other
// sentinels. That takes about 2 s, most of it the sentinels finding each
// other (they announce themselves every 2 s). On error, whatever was
// started is stopped.
func StartSentinel(ctx context.Context, cfg *SentinelConfig) (_ *Sentinel, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	s := &Sentinel{cfg: c}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	procs, err := startAll(ctx, []*redisproc.Config{s.dataConfig()})
	s.addNodes(procs)
	if err != nil {
		return nil, fmt.Errorf("redisha: master: %w", err)
	}
	master := s.nodes[0]
	cfgs := make([]*redisproc.Config, c.Replicas)
	for i := range cfgs {
		cfgs[i] = s.dataConfig("--replicaof", "127.0.0.1", strconv.Itoa(master.proc.Port()))
	}
	procs, err = startAll(ctx, cfgs)
	s.addNodes(procs)
	if err != nil {
		return nil, fmt.Errorf("redisha: replica: %w", err)
	}
	// In sync before the sentinels start: a sentinel learns the replicas
	// from the master's INFO, which it reads at once and then every 10 s.
	if err := poll(ctx, "replicas in sync", s.replicasInSync); err != nil {
		return nil, err
	}

	cfgs = make([]*redisproc.Config, sentinelCount)
	for i := range cfgs {
		cfgs[i] = &redisproc.Config{Bin: c.Bin, Dir: c.Dir, Keep: c.Keep, ConfigFile: s.sentinelConf(master.proc.Port()), Args: []string{"--sentinel"}}
	}
	procs, err = startAll(ctx, cfgs)
	for _, p := range procs {
		if p != nil {
			s.sentinels = append(s.sentinels, p)
			s.clients = append(s.clients, redis.NewSentinelClient(clientOptions(p.Addr())))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("redisha: sentinel: %w", err)
	}
	if err := poll(ctx, "sentinels ready", s.sentinelsReady); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) dataConfig(args ...string) *redisproc.Config {
	args = append(append(args, dataArgs...), s.cfg.Args...)
	return &redisproc.Config{Bin: s.cfg.Bin, Dir: s.cfg.Dir, Keep: s.cfg.Keep, Args: args}
}

func (s *Sentinel) addNodes(procs []*redisproc.Server) {
	for _, p := range procs {
		if p != nil {
			s.nodes = append(s.nodes, &node{proc: p, rdb: newClient(p.Addr())})
		}
	}
}

// sentinelConf is a sentinel's configuration file. Its port and bind
// address come from redisproc's arguments, which override the file.
func (s *Sentinel) sentinelConf(masterPort int) string {
	name := s.cfg.MasterName
	return fmt.Sprintf(`bind 127.0.0.1
sentinel resolve-hostnames no
sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s %[4]s
sentinel failover-timeout %[1]s %[5]s
sentinel parallel-syncs %[1]s 1
`, name, masterPort, quorum, ms(s.cfg.DownAfter), ms(s.cfg.FailoverTimeout))
}

// replicasInSync says why not every replica has finished its first sync
// with the master, or nil.
func (s *Sentinel) replicasInSync(ctx context.Context) error {
	for _, n := range s.nodes[1:] {
		info, err := n.rdb.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("replica %s: %w", n.addr(), err)
		}
		if st := infoField(info, "master_link_status"); st != "up" {
			return fmt.Errorf("replica %s: master_link_status:%s", n.addr(), st)
		}
	}
	info, err := s.nodes[0].rdb.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("master %s: %w", s.nodes[0].addr(), err)
	}
	if got := infoField(info, "connected_slaves"); got != strconv.Itoa(s.cfg.Replicas) {
		return fmt.Errorf("master %s: connected_slaves:%s, want %d", s.nodes[0].addr(), got, s.cfg.Replicas)
	}
	return nil
}

// sentinelsReady says why some sentinel could not yet run a fail-over, or
// nil: each must see the master up, every replica with its link to the
// master up, and the other sentinels.
func (s *Sentinel) sentinelsReady(ctx context.Context) error {
	want := map[string]bool{}
	for _, n := range s.nodes[1:] {
		want[n.addr()] = true
	}
	for i, sc := range s.clients {
		at := s.sentinels[i].Addr()
		m, err := sc.Master(ctx, s.cfg.MasterName).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", at, err)
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: master flags %q", at, m["flags"])
		}
		if m["num-slaves"] != strconv.Itoa(s.cfg.Replicas) {
			return fmt.Errorf("sentinel %s: num-slaves %s, want %d", at, m["num-slaves"], s.cfg.Replicas)
		}
		if m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s: num-other-sentinels %s, want %d", at, m["num-other-sentinels"], sentinelCount-1)
		}
		reps, err := sc.Replicas(ctx, s.cfg.MasterName).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", at, err)
		}
		for _, r := range reps {
			if !want[r["name"]] || r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replica %s flags %q master-link-status %q", at, r["name"], r["flags"], r["master-link-status"])
			}
		}
	}
	return nil
}

// MasterName is the name the sentinels know the master by.
func (s *Sentinel) MasterName() string { return s.cfg.MasterName }

// SentinelAddrs are the sentinels' host:port addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		addrs[i] = p.Addr()
	}
	return addrs
}

// Master is the master's host:port as the first sentinel that answers
// names it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var errs []error
	for i, sc := range s.clients {
		addr, err := s.masterSaidBy(ctx, sc)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", s.sentinels[i].Addr(), err))
	}
	return "", fmt.Errorf("redisha: master: %w", errors.Join(errs...))
}

func (s *Sentinel) masterSaidBy(ctx context.Context, sc *redis.SentinelClient) (string, error) {
	hp, err := sc.GetMasterAddrByName(ctx, s.cfg.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME replied %q", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// KillMaster SIGKILLs the process of the current master (as Master names
// it) and returns its address. It kills only a server StartSentinel
// started.
func (s *Sentinel) KillMaster(ctx context.Context) (string, error) {
	addr, err := s.Master(ctx)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.addr() == addr && !n.killed {
			n.killed = true
			n.proc.Kill()
			return addr, nil
		}
	}
	return "", fmt.Errorf("redisha: the sentinels name %s, which is not a running server of this set-up", addr)
}

// WaitFailover waits until every sentinel names a master other than
// oldAddr and that server answers ROLE as a master, and returns its
// address. It looks every 50 ms until ctx ends (30 s when ctx has no
// deadline). With the defaults a fail-over takes 2-4 s from the kill.
func (s *Sentinel) WaitFailover(ctx context.Context, oldAddr string) (string, error) {
	ctx, cancel := withDeadline(ctx, defaultWait)
	defer cancel()
	var newAddr string
	err := poll(ctx, "fail-over from "+oldAddr, func(ctx context.Context) error {
		newAddr = ""
		for i, sc := range s.clients {
			addr, err := s.masterSaidBy(ctx, sc)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.sentinels[i].Addr(), err)
			}
			if addr == oldAddr {
				return fmt.Errorf("sentinel %s still names %s", s.sentinels[i].Addr(), addr)
			}
			if newAddr != "" && addr != newAddr {
				return fmt.Errorf("sentinels disagree: %s and %s", newAddr, addr)
			}
			newAddr = addr
		}
		n := s.node(newAddr)
		if n == nil {
			return fmt.Errorf("the sentinels name %s, which is not a running server of this set-up", newAddr)
		}
		r, err := role(ctx, n.rdb)
		if err != nil {
			return fmt.Errorf("%s: ROLE: %w", newAddr, err)
		}
		if r != "master" {
			return fmt.Errorf("the sentinels name %s, whose ROLE is %s", newAddr, r)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return newAddr, nil
}

// node is the running server at addr, or nil.
func (s *Sentinel) node(addr string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.addr() == addr && !n.killed {
			return n
		}
	}
	return nil
}

// Close SIGKILLs every process StartSentinel started, sentinels first, and
// removes their directories (unless SentinelConfig.Keep). It is safe to
// call more than once.
func (s *Sentinel) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.clients {
		_ = sc.Close()
	}
	for _, p := range s.sentinels {
		p.Kill()
		p.Stop()
	}
	for _, n := range s.nodes {
		n.killed = true
		n.stop()
	}
}
