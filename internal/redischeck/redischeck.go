// Package redischeck is the start-up check every driver runs (Driver.Check):
// the server answers, is Redis 7.0 or later, will not evict keys, and lets
// the connection's ACL user send what the driver sends (Permissions).
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
// A server that answers INFO or CONFIG with an error reply (an ACL that
// forbids them, a managed service, an embedded test server) is not refused:
// the check logs what it could not read and lets the process start.
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
	switch {
	case err != nil && errors.As(err, &reply):
		log.WarnContext(ctx, name+": cannot read the server version; assuming Redis 7.0 or later", "error", err)
	case err != nil:
		return fmt.Errorf("%s: check: INFO server: %w", name, err)
	default:
		version, ok := field(info, "redis_version")
		if !ok {
			return fmt.Errorf("%s: check: INFO server has no redis_version", name)
		}
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
