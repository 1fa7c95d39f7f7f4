package middleware

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/internal/keys"
)

// IdempotencyRedisKey returns the Redis key Idempotency keeps the state of
// idempotency key key in, under prefix ("" for the default): for an
// operator who wants to look at it or delete it (deleting a "done" key lets
// the next job with that key run).
func IdempotencyRedisKey(prefix, key string) string {
	return hashed(orDefault(prefix)+":idem:", key)
}

// RateLimitRedisKey returns the Redis key of RateLimit's window for limiter
// key key, under prefix ("" for the default) and name (RateLimitConfig.Name;
// "" for none).
func RateLimitRedisKey(prefix, name, key string) string {
	base := orDefault(prefix) + ":rl:"
	if name != "" {
		base += name + ":"
	}
	return hashed(base, key)
}

func orDefault(prefix string) string {
	if prefix == "" {
		return keys.DefaultPrefix
	}
	return prefix
}

// hashed returns base{<h>}, h the first 32 hex digits (128 bits) of the
// SHA-256 of key. A job's key is any bytes its enqueuer chose, of any
// length; its hash makes a Redis key that is short and printable, whose
// hash tag (the braces) no key can move, and that names no other kind of key.
func hashed(base, key string) string {
	sum := sha256.Sum256([]byte(key))
	return base + "{" + hex.EncodeToString(sum[:16]) + "}"
}

// shown is key as errors and log records show it: cut to 64 bytes (at a
// character boundary, "..." added), as a key may be any size.
func shown(key string) string {
	if len(key) <= 64 {
		return key
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "..."
}
