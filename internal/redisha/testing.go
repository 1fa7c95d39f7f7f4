package redisha

import (
	"fmt"
	"testing"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// install says how to get a redis-server when there is none or it fails.
const install = "these tests start their own Redis servers: install Redis 7.0 or later (apt-get install redis-server) or set CONVEYOR_REDIS_SERVER to a redis-server binary"

// SentinelT is StartSentinel for a test: the servers' directories are in
// t's temporary directory (unless cfg.Dir says otherwise), Close runs when
// t ends, and a failure to start fails t saying how to get a redis-server.
func SentinelT(t testing.TB, cfg *SentinelConfig) *Sentinel {
	t.Helper()
	var c SentinelConfig
	if cfg != nil {
		c = *cfg
	}
	c.Bin = testBin(t, c.Bin)
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	s, err := StartSentinel(t.Context(), &c)
	if err != nil {
		t.Fatalf("starting a master, its replicas and 3 sentinels with %s: %v\n(%s)", c.Bin, err, install)
	}
	t.Cleanup(s.Close)
	return s
}

// ClusterT is StartCluster for a test: the nodes' directories are in t's
// temporary directory (unless cfg.Dir says otherwise), Close runs when t
// ends, and a failure to start fails t saying how to get a redis-server.
func ClusterT(t testing.TB, cfg *ClusterConfig) *Cluster {
	t.Helper()
	var c ClusterConfig
	if cfg != nil {
		c = *cfg
	}
	c.Bin = testBin(t, c.Bin)
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	cl, err := StartCluster(t.Context(), &c)
	if err != nil {
		t.Fatalf("starting a Redis Cluster with %s: %v\n(%s)", c.Bin, err, install)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testBin(t testing.TB, bin string) string {
	t.Helper()
	if bin != "" {
		return bin
	}
	bin, err := redisproc.Bin()
	if err != nil {
		t.Fatal(fmt.Errorf("%w\n(%s)", err, install))
	}
	return bin
}
