// Package devredis gives the examples a Redis to talk to with no set-up.
//
// Connect picks, in order:
//
//  1. REDIS_URL when set (redis://[user:pass@]host:port/db). If that server
//     does not answer, Connect fails: a user who named a server wants that
//     one, not a silent stand-in.
//  2. The Redis on 127.0.0.1:6379, when it answers PING.
//  3. An embedded in-memory Redis (miniredis), announced loudly on stderr:
//     nothing in it survives the process. A ticker advances its TTL clock,
//     which miniredis otherwise never moves, so leases and TTLs expire.
//
// It is for examples only; the library itself never falls back silently.
// miniredis runs Conveyor's Lua but lacks a few commands (SPUBLISH, for
// one), and it is a single process: use a real Redis for anything else.
//
//	rdb, cleanup, err := devredis.Connect(ctx, logger)
//	if err != nil {
//		return err
//	}
//	defer cleanup()
//	d, err := list.New(rdb, nil)
package devredis
