// Package redisha runs highly available Redis set-ups for tests and the
// chaos suite, so that a fail-over is real: a master killed with SIGKILL
// and a replica promoted in its place.
//
// StartSentinel starts a master, its replicas (one by default) and three
// sentinels watching it: five redis-server processes with the defaults,
// ready in about 2 s. StartCluster starts a Redis Cluster of three masters
// with one replica each: six processes, ready in 1-3 s. Every process
// listens on a free loopback port chosen at start (a cluster node's bus
// port too), keeps nothing on disk but its log (and a sentinel's config
// file, a node's nodes.conf), and takes a few MB. With the defaults a
// fail-over takes 2-4 s from the kill.
//
// Processes are started through redisproc: they are signalled only by the
// PID they were started with, and Close SIGKILLs exactly the processes
// Start started and removes their directories. Nothing else is touched.
//
//	s, err := redisha.StartSentinel(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs()})
//	old, err := s.KillMaster(ctx)
//	...
//	newAddr, err := s.WaitFailover(ctx, old)
//
// In tests, SentinelT and ClusterT do the same, fail the test with how to
// install redis-server when there is none, and close when the test ends.
package redisha
