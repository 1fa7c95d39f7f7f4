// Package redischeck is the start-up check every driver runs (Driver.Check):
// the server answers, is Redis 7.0 or later, will not evict keys, and lets
// the connection's ACL user send what the driver sends (Permissions). For
// the programs (the CLI, the examples) it also words the two ways they fail
// before a driver exists, each in one line: a Redis URL that is not one
// (ParseURL) and a server that does not answer (Unreachable).
package redischeck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// MinMajor is the oldest Redis major version Conveyor supports.
const MinMajor = 7

// Check pings the server, refuses one older than MinMajor with
// broker.ErrRedisTooOld, and warns on log when maxmemory-policy lets Redis
// evict keys (an evicted lease or queue key loses or duplicates jobs). name
// starts error messages ("list").
//
// The version comes from INFO server, or from HELLO when INFO gets an error
// reply (an ACL that forbids it, a managed service, an embedded server such
// as miniredis). A server that answers neither is not refused: the check
// warns that it cannot read the version and lets the process start. One
// whose CONFIG GET fails is not refused either (logged at debug).
func Check(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, name string) error {
	if err := rdb.Ping(ctx).Err(); err != nil {
		var m Missing
		if m.Refused(err, "PING", "") {
			return m.Err(ctx, rdb, name)
		}
		return fmt.Errorf("%s: redis unreachable: %w", name, err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	var reply redis.Error
	version, ok := "", false
	switch {
	case err != nil && errors.As(err, &reply):
		var server string
		var herr error
		if server, version, herr = hello(ctx, rdb); herr != nil {
			log.WarnContext(ctx, name+": cannot read the server version; assuming Redis 7.0 or later", "error", err, "hello", herr)
			break
		}
		log.DebugContext(ctx, name+": INFO refused; version read from HELLO", "error", err, "server", server, "version", version)
		ok = true
	case err != nil:
		return fmt.Errorf("%s: check: INFO server: %w", name, err)
	default:
		if version, ok = field(info, "redis_version"); !ok {
			return fmt.Errorf("%s: check: INFO server has no redis_version", name)
		}
	}
	if ok {
		major, _, _ := strings.Cut(version, ".")
		if n, err := strconv.Atoi(major); err != nil || n < MinMajor {
			return fmt.Errorf("%s: check: redis %s, need %d.0 or later: %w", name, version, MinMajor, broker.ErrRedisTooOld)
		}
	}
	policy, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	switch {
	case err != nil:
		log.DebugContext(ctx, name+": cannot read maxmemory-policy", "error", err)
	case policy["maxmemory-policy"] != "" && policy["maxmemory-policy"] != "noeviction":
		log.WarnContext(ctx, name+": redis maxmemory-policy is not noeviction; evicted leases or queue keys lose or duplicate jobs",
			"maxmemory-policy", policy["maxmemory-policy"])
	}
	return nil
}

func field(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// hello reads the server's name and version from its HELLO reply, for a
// server that refuses INFO. A bare HELLO first: it changes nothing on the
// connection (Redis 6.2 and later). A server that wants the protocol
// version as well (miniredis does) is sent the one rdb's connections
// negotiated, so the pooled connection keeps its protocol; with a client
// whose protocol is unknown, hello gives up.
func hello(ctx context.Context, rdb redis.UniversalClient) (server, version string, err error) {
	r, err := rdb.Do(ctx, "HELLO").Result()
	if err != nil {
		var reply redis.Error
		p := protocol(rdb)
		if !errors.As(err, &reply) || p == 0 {
			return "", "", err
		}
		if r, err = rdb.Do(ctx, "HELLO", p).Result(); err != nil {
			return "", "", err
		}
	}
	fields := map[string]string{}
	add := func(k, v any) {
		if ks, ok := k.(string); ok {
			fields[ks] = fmt.Sprint(v)
		}
	}
	switch r := r.(type) {
	case map[any]any: // RESP3
		for k, v := range r {
			add(k, v)
		}
	case []any: // RESP2: name, value, name, value...
		for i := 0; i+1 < len(r); i += 2 {
			add(r[i], r[i+1])
		}
	}
	version, ok := fields["version"]
	if !ok {
		return "", "", fmt.Errorf("HELLO reply has no version: %v", r)
	}
	return fields["server"], version, nil
}

// protocol returns the RESP version rdb's connections ask for in their
// HELLO (go-redis's default, 3, when unset), or 0 for a client of
// unknown type.
func protocol(rdb redis.UniversalClient) int {
	var p int
	switch c := rdb.(type) {
	case *redis.Client:
		p = c.Options().Protocol
	case *redis.ClusterClient:
		p = c.Options().Protocol
	case *redis.Ring:
		p = c.Options().Protocol
	default:
		return 0
	}
	if p < 2 {
		p = 3
	}
	return p
}
