// Package redisproc runs a private redis-server for tests and the chaos
// suite: on a free loopback port, in a directory of its own, with nothing on
// disk unless its arguments ask for it, and optionally with extra
// environment (the LD_PRELOAD clock shim of SkewEnv). It never touches a
// server it did not start: a server is signalled only by the PID it was
// started with, while its exit is still awaited (so the PID cannot have been
// reused), and on Linux it dies with the process that started it.
//
//	srv, err := redisproc.Start(ctx, &redisproc.Config{Args: []string{"--maxmemory", "2mb"}})
//	if err != nil {
//		return err
//	}
//	defer srv.Stop()
//	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
package redisproc
