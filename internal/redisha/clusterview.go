package redisha

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// nodeLine is one line of CLUSTER NODES: a node as the asked node sees it.
type nodeLine struct {
	id     string
	addr   string // host:port, without the bus port
	flags  []string
	master string // the id of the node it replicates; "" for a master
	link   string // connected or disconnected
	slots  [][2]int
}

func (v *nodeLine) has(flag string) bool { return slices.Contains(v.flags, flag) }

func (v *nodeLine) serves(slot int) bool {
	for _, r := range v.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterView is CLUSTER NODES by node id.
type clusterView map[string]*nodeLine

func (cv clusterView) byAddr(addr string) *nodeLine {
	for _, v := range cv {
		if v.addr == addr {
			return v
		}
	}
	return nil
}

func clusterNodes(ctx context.Context, n *clusterNode) (clusterView, error) {
	s, err := n.rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.addr(), err)
	}
	cv, err := parseClusterNodes(s)
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.addr(), err)
	}
	return cv, nil
}

// parseClusterNodes reads CLUSTER NODES: per line
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slot or first-last>... Slots being migrated
// ([slot->-id], [slot-<-id]) are not served yet and are skipped.
func parseClusterNodes(s string) (clusterView, error) {
	cv := clusterView{}
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		v := &nodeLine{id: f[0], flags: strings.Split(f[2], ","), link: f[7]}
		v.addr, _, _ = strings.Cut(f[1], "@")
		v.addr, _, _ = strings.Cut(v.addr, ",")
		if f[3] != "-" {
			v.master = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad slot %q in %q", r, line)
			}
			v.slots = append(v.slots, [2]int{a, b})
		}
		cv[v.id] = v
	}
	return cv, nil
}
