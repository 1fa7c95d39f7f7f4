package redischeck

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// wantURL is the form ParseURL asks for.
const wantURL = "want redis://host:port/db or rediss://host:port/db"

// ParseURL parses raw as redis.ParseURL does, with an error a person can
// act on in one line: it names from, where raw came from ("REDIS_URL",
// "-redis"), shows raw with its password hidden, and says what a Redis URL
// looks like:
//
//	REDIS_URL "notaurl" is not a Redis URL: want redis://host:port/db or rediss://host:port/db
func ParseURL(raw, from string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	if err == nil {
		return opts, nil
	}
	u, perr := url.Parse(raw)
	switch {
	case perr != nil:
		// url.Error quotes the whole URL, password and all: keep its reason.
		var uerr *url.Error
		if errors.As(perr, &uerr) {
			perr = uerr.Err
		}
		return nil, fmt.Errorf("%s %q is not a Redis URL: %v; %s", from, redact(raw), perr, wantURL)
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		return nil, fmt.Errorf("%s %q is not a Redis URL: %s", from, redact(raw), wantURL)
	default:
		return nil, fmt.Errorf("%s %q: %s; %s", from, redact(raw), strings.TrimPrefix(err.Error(), "redis: "), wantURL)
	}
}

// Unreachable returns the error of a program that cannot reach the Redis
// at addr, named by from ("REDIS_URL", "-redis"): err, the failed dial or
// PING, and when nothing listens on a loopback address how to start a
// server there:
//
//	cannot reach Redis at 127.0.0.1:6379 (REDIS_URL): dial tcp 127.0.0.1:6379: connect: connection refused; start one with: redis-server
func Unreachable(addr, from string, err error) error {
	return fmt.Errorf("cannot reach Redis at %s (%s): %w%s", addr, from, err, startHint(addr, err))
}

// startHint says how to start a Redis on addr when err says nothing
// listens there and addr is on this machine; else "": a remote server
// that refuses, or a timeout, is the operator's to look into.
func startHint(addr string, err error) string {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	host, port, serr := net.SplitHostPort(addr)
	if serr != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	if port == "6379" {
		return "; start one with: redis-server"
	}
	return "; start one with: redis-server --port " + port
}

// redact hides the password in raw, for messages. A URL that does not
// parse loses everything before its last "@", which may hold one.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := strings.Index(raw, "://")
	if start < 0 || start > at {
		return "xxxxx" + raw[at:]
	}
	return raw[:start+3] + "xxxxx" + raw[at:]
}
