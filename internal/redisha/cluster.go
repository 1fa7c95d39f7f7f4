package redisha

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// clusterSlots is the number of hash slots of every Redis Cluster.
const clusterSlots = 16384

// ClusterConfig says what StartCluster starts. The zero value starts three
// masters with one replica each.
type ClusterConfig struct {
	// Masters is how many masters share the slots, evenly. A replica takes
	// over only with the votes of a majority of the masters, so a cluster
	// that must survive losing one needs at least 3. Defaults to 3.
	Masters int
	// ReplicasPerMaster is how many replicas each master has. Defaults
	// to 1.
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a node must not answer
	// before the others think it failing. A fail-over starts one to two of
	// these after a master dies. Defaults to 1 s.
	NodeTimeout time.Duration
	// Args are added to every node's arguments, last, so they can override
	// this package's (cluster mode, and --repl-diskless-sync-delay 0).
	Args []string
	// Bin is the redis-server binary. Defaults to redisproc.Bin's.
	Bin string
	// Dir is where each node's directory is made. Defaults to
	// os.TempDir().
	Dir string
	// StartTimeout bounds StartCluster. Defaults to 30 s.
	StartTimeout time.Duration
	// Keep leaves the nodes' directories (logs, nodes.conf) in place after
	// Close.
	Keep bool
}

func (c *ClusterConfig) withDefaults() (ClusterConfig, error) {
	var out ClusterConfig
	if c != nil {
		out = *c
	}
	switch {
	case out.Masters < 0 || out.ReplicasPerMaster < 0:
		return out, fmt.Errorf("redisha: ClusterConfig asks for %d masters with %d replicas each, want positive counts (0 for the default)", out.Masters, out.ReplicasPerMaster)
	case out.NodeTimeout < 0 || out.StartTimeout < 0:
		return out, errors.New("redisha: ClusterConfig has a negative duration")
	}
	if out.Masters == 0 {
		out.Masters = 3
	}
	if out.Masters > clusterSlots {
		return out, fmt.Errorf("redisha: ClusterConfig.Masters is %d, more than there are slots", out.Masters)
	}
	if out.ReplicasPerMaster == 0 {
		out.ReplicasPerMaster = 1
	}
	if out.NodeTimeout == 0 {
		out.NodeTimeout = time.Second
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

// Cluster is a Redis Cluster of masters and their replicas on loopback
// ports StartCluster chose. Its methods are safe for concurrent use.
type Cluster struct {
	cfg   ClusterConfig
	mu    sync.Mutex
	nodes []*clusterNode // the masters, then master i's replicas
	// replicasAtKill holds, for each master KillMaster killed, the
	// addresses of its replicas then.
	replicasAtKill map[string][]string
}

type clusterNode struct {
	node
	id      string
	busPort int
	master  int // index in nodes of the master it was started to replicate; -1 for a master
}

// StartCluster starts cfg.Masters masters and their replicas, assigns
// each master an equal range of slots, joins the nodes and makes the
// replicas replicate, all through commands (no redis-cli). It returns once
// every node says cluster_state:ok with all slots assigned, knows every
// other node in its role, and every replica's link to its master is up;
// with the defaults that takes 1-3 s. On error, whatever was started is
// stopped.
func StartCluster(ctx context.Context, cfg *ClusterConfig) (_ *Cluster, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	cl := &Cluster{cfg: c, replicasAtKill: map[string][]string{}}
	defer func() {
		if err != nil {
			cl.Close()
		}
	}()
	if err := cl.startNodes(ctx); err != nil {
		return nil, err
	}
	for i, n := range cl.nodes {
		if n.id, err = n.rdb.ClusterMyID(ctx).Result(); err != nil {
			return nil, fmt.Errorf("redisha: %s: CLUSTER MYID: %w", n.addr(), err)
		}
		if n.master >= 0 {
			continue
		}
		// A distinct config epoch per master, as redis-cli gives them,
		// spares the nodes resolving a collision.
		if err := n.rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return nil, fmt.Errorf("redisha: %s: CLUSTER SET-CONFIG-EPOCH: %w", n.addr(), err)
		}
		first, last := i*clusterSlots/c.Masters, (i+1)*clusterSlots/c.Masters-1
		if err := n.rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return nil, fmt.Errorf("redisha: %s: CLUSTER ADDSLOTSRANGE %d %d: %w", n.addr(), first, last, err)
		}
	}
	for _, n := range cl.nodes[1:] {
		// The bus port is given: it is not the default port+10000.
		if err := cl.nodes[0].rdb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.proc.Port(), n.busPort).Err(); err != nil {
			return nil, fmt.Errorf("redisha: %s: CLUSTER MEET %s: %w", cl.nodes[0].addr(), n.addr(), err)
		}
	}
	// A replica can replicate only a master it knows.
	if err := poll(ctx, "nodes meet", cl.allMet); err != nil {
		return nil, err
	}
	for _, n := range cl.nodes {
		if n.master < 0 {
			continue
		}
		if err := n.rdb.ClusterReplicate(ctx, cl.nodes[n.master].id).Err(); err != nil {
			return nil, fmt.Errorf("redisha: %s: CLUSTER REPLICATE %s: %w", n.addr(), cl.nodes[n.master].addr(), err)
		}
	}
	if err := poll(ctx, "cluster ok", cl.ready); err != nil {
		return nil, err
	}
	return cl, nil
}

// startNodes starts every node, each with a bus port of its own. A bus
// port another process took meanwhile makes that node fail; it is tried
// again with another, three times at most.
func (cl *Cluster) startNodes(ctx context.Context) error {
	total := cl.cfg.Masters * (1 + cl.cfg.ReplicasPerMaster)
	nodes := make([]*clusterNode, total)
	errs := make([]error, total)
	var wg sync.WaitGroup
	for i := range total {
		master := -1
		if i >= cl.cfg.Masters {
			master = (i - cl.cfg.Masters) / cl.cfg.ReplicasPerMaster
		}
		wg.Go(func() {
			for range 3 {
				nodes[i], errs[i] = cl.startNode(ctx, master)
				if errs[i] == nil || !strings.Contains(errs[i].Error(), "in use") {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			if n != nil {
				cl.nodes = append(cl.nodes, n) // for Close
			}
		}
		return fmt.Errorf("redisha: cluster node: %w", err)
	}
	cl.nodes = nodes
	return nil
}

func (cl *Cluster) startNode(ctx context.Context, master int) (*clusterNode, error) {
	bus, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", ms(cl.cfg.NodeTimeout), "--cluster-port", strconv.Itoa(bus),
	}, dataArgs...)
	args = append(args, cl.cfg.Args...)
	p, err := redisproc.Start(ctx, &redisproc.Config{Bin: cl.cfg.Bin, Dir: cl.cfg.Dir, Keep: cl.cfg.Keep, Args: args})
	if err != nil {
		return nil, err
	}
	return &clusterNode{node: node{proc: p, rdb: newClient(p.Addr())}, busPort: bus, master: master}, nil
}

// allMet says why some node does not yet know every other one, or nil.
func (cl *Cluster) allMet(ctx context.Context) error {
	for _, n := range cl.nodes {
		view, err := clusterNodes(ctx, n)
		if err != nil {
			return err
		}
		for _, m := range cl.nodes {
			v, ok := view[m.id]
			if !ok {
				return fmt.Errorf("%s does not know %s yet", n.addr(), m.addr())
			}
			if v.has("handshake") || v.has("noaddr") {
				return fmt.Errorf("%s sees %s as %s", n.addr(), m.addr(), strings.Join(v.flags, ","))
			}
		}
	}
	return nil
}

// ready says why the cluster is not yet as StartCluster promises, or nil.
func (cl *Cluster) ready(ctx context.Context) error {
	for _, n := range cl.nodes {
		if err := clusterOK(ctx, n, len(cl.nodes)); err != nil {
			return err
		}
		view, err := clusterNodes(ctx, n)
		if err != nil {
			return err
		}
		for _, m := range cl.nodes {
			v := view[m.id]
			switch {
			case v == nil:
				return fmt.Errorf("%s does not know %s", n.addr(), m.addr())
			case v.has("fail") || v.has("fail?") || v.link != "connected":
				return fmt.Errorf("%s sees %s as %s, link %s", n.addr(), m.addr(), strings.Join(v.flags, ","), v.link)
			case m.master < 0 && !v.has("master"):
				return fmt.Errorf("%s does not see %s as a master yet", n.addr(), m.addr())
			case m.master >= 0 && (!v.has("slave") || v.master != cl.nodes[m.master].id):
				return fmt.Errorf("%s does not see %s as a replica of %s yet", n.addr(), m.addr(), cl.nodes[m.master].addr())
			}
		}
		if n.master >= 0 {
			info, err := n.rdb.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: %w", n.addr(), err)
			}
			if st := infoField(info, "master_link_status"); st != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", n.addr(), st)
			}
		}
	}
	return nil
}

// clusterOK says why n does not report a whole cluster of known nodes,
// or nil. known is how many nodes it must know; 0 skips that check.
func clusterOK(ctx context.Context, n *clusterNode, known int) error {
	info, err := n.rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", n.addr(), err)
	}
	if st := infoField(info, "cluster_state"); st != "ok" {
		return fmt.Errorf("%s: cluster_state:%s", n.addr(), st)
	}
	if got := infoField(info, "cluster_slots_assigned"); got != strconv.Itoa(clusterSlots) {
		return fmt.Errorf("%s: cluster_slots_assigned:%s", n.addr(), got)
	}
	if got := infoField(info, "cluster_known_nodes"); known > 0 && got != strconv.Itoa(known) {
		return fmt.Errorf("%s: cluster_known_nodes:%s, want %d", n.addr(), got, known)
	}
	return nil
}

// Seeds are the addresses of the masters as started, for a cluster
// client's Addrs.
func (cl *Cluster) Seeds() []string {
	var addrs []string
	for _, n := range cl.nodes {
		if n.master < 0 {
			addrs = append(addrs, n.addr())
		}
	}
	return addrs
}

// Masters are the addresses of the masters that serve slots, as a running
// node sees them, in the order of their first slot.
func (cl *Cluster) Masters(ctx context.Context) ([]string, error) {
	view, err := cl.view(ctx)
	if err != nil {
		return nil, err
	}
	var ms []*nodeLine
	for _, v := range view {
		if v.has("master") && !v.has("fail") && len(v.slots) > 0 {
			ms = append(ms, v)
		}
	}
	slices.SortFunc(ms, func(a, b *nodeLine) int { return a.slots[0][0] - b.slots[0][0] })
	addrs := make([]string, len(ms))
	for i, v := range ms {
		addrs[i] = v.addr
	}
	return addrs, nil
}

// MasterOfKey is the address of the master that serves key's slot, as a
// running node sees it.
func (cl *Cluster) MasterOfKey(ctx context.Context, key string) (string, error) {
	n, err := cl.anyRunning()
	if err != nil {
		return "", err
	}
	slot, err := n.rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("redisha: %s: CLUSTER KEYSLOT: %w", n.addr(), err)
	}
	view, err := clusterNodes(ctx, n)
	if err != nil {
		return "", fmt.Errorf("redisha: %w", err)
	}
	for _, v := range view {
		if v.has("master") && !v.has("fail") && v.serves(int(slot)) {
			return v.addr, nil
		}
	}
	return "", fmt.Errorf("redisha: %s knows no master of slot %d", n.addr(), slot)
}

// KillMaster SIGKILLs the node at addr, which must be a running master
// StartCluster started, after noting its replicas for WaitFailover.
func (cl *Cluster) KillMaster(ctx context.Context, addr string) error {
	n := cl.running(addr)
	if n == nil {
		return fmt.Errorf("redisha: %s is not a running node of this cluster", addr)
	}
	view, err := clusterNodes(ctx, n)
	if err != nil {
		return fmt.Errorf("redisha: %w", err)
	}
	self := view[n.id]
	if self == nil || !self.has("master") {
		return fmt.Errorf("redisha: %s is not a master", addr)
	}
	var replicas []string
	for _, v := range view {
		if v.master == n.id {
			replicas = append(replicas, v.addr)
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if n.killed {
		return fmt.Errorf("redisha: %s is not a running node of this cluster", addr)
	}
	cl.replicasAtKill[addr] = replicas
	n.killed = true
	n.proc.Kill()
	return nil
}

// WaitFailover waits until a replica oldAddr had (when KillMaster killed
// it; else as a running node sees it now) answers ROLE as a master, every
// running node says cluster_state:ok and none maps a slot to oldAddr, and
// returns that replica's address. It looks every 50 ms until ctx ends (30 s
// when ctx has no deadline). With the defaults a fail-over takes 2-4 s
// from the kill.
func (cl *Cluster) WaitFailover(ctx context.Context, oldAddr string) (string, error) {
	ctx, cancel := withDeadline(ctx, defaultWait)
	defer cancel()
	cl.mu.Lock()
	candidates, ok := cl.replicasAtKill[oldAddr]
	cl.mu.Unlock()
	if !ok {
		view, err := cl.view(ctx)
		if err != nil {
			return "", err
		}
		old := view.byAddr(oldAddr)
		if old == nil {
			return "", fmt.Errorf("redisha: the cluster does not know %s", oldAddr)
		}
		for _, v := range view {
			if v.master == old.id {
				candidates = append(candidates, v.addr)
			}
		}
	}
	if len(candidates) == 0 {
		return "", fmt.Errorf("redisha: %s had no replica to take over", oldAddr)
	}
	var newAddr string
	err := poll(ctx, "fail-over from "+oldAddr, func(ctx context.Context) error {
		newAddr = ""
		for _, a := range candidates {
			if n := cl.running(a); n != nil {
				if r, err := role(ctx, n.rdb); err == nil && r == "master" {
					newAddr = a
					break
				}
			}
		}
		if newAddr == "" {
			return fmt.Errorf("no replica of %s (%s) is a master yet", oldAddr, strings.Join(candidates, ", "))
		}
		for _, n := range cl.runningNodes() {
			if err := clusterOK(ctx, n, 0); err != nil {
				return err
			}
			view, err := clusterNodes(ctx, n)
			if err != nil {
				return err
			}
			if old := view.byAddr(oldAddr); old != nil && len(old.slots) > 0 {
				return fmt.Errorf("%s still maps slots to %s", n.addr(), oldAddr)
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return newAddr, nil
}

// Close SIGKILLs every node StartCluster started and removes their
// directories (unless ClusterConfig.Keep). It is safe to call more than
// once.
func (cl *Cluster) Close() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, n := range cl.nodes {
		n.killed = true
		n.stop()
	}
}

// running is the running node at addr, or nil.
func (cl *Cluster) running(addr string) *clusterNode {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, n := range cl.nodes {
		if n.addr() == addr && !n.killed {
			return n
		}
	}
	return nil
}

func (cl *Cluster) runningNodes() []*clusterNode {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []*clusterNode
	for _, n := range cl.nodes {
		if !n.killed {
			out = append(out, n)
		}
	}
	return out
}

func (cl *Cluster) anyRunning() (*clusterNode, error) {
	if ns := cl.runningNodes(); len(ns) > 0 {
		return ns[0], nil
	}
	return nil, errors.New("redisha: no node of the cluster runs")
}

// view is the cluster as the first running node that answers sees it.
func (cl *Cluster) view(ctx context.Context) (clusterView, error) {
	var errs []error
	for _, n := range cl.runningNodes() {
		v, err := clusterNodes(ctx, n)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, errors.New("redisha: no node of the cluster runs")
	}
	return nil, fmt.Errorf("redisha: %w", errors.Join(errs...))
}
