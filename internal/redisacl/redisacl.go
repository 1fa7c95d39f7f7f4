package redisacl

// LeastPrivilege returns the ACL rules (after "ACL SETUSER <name> reset on
// ><password>") of the least-privilege user docs/redis-keys.md, section
// ACL, gives operators, for the keys and channels of every driver under
// prefix: the key and channel patterns, the data-type categories, and the
// few single commands the drivers and middleware need outside them. A
// Redis Cluster needs "+cluster|slots" as well, for go-redis's slot map.
func LeastPrivilege(prefix string) []string {
	return append(Patterns(prefix),
		"+@list", "+@sortedset", "+@hash", "+@set", "+@stream", "+@string", "+@pubsub",
		"+evalsha", "+eval", "+time", "+del", "+exists", "+pexpire", "+pttl", "+ping", "+hello",
	)
}

// Patterns returns the key and the channel pattern of a user of the
// drivers under prefix, ~<prefix>:* and &<prefix>:*: every key and channel
// of every queue, the queue registry and the middleware keys. A per-queue
// pattern is not enough: the registry has no hash tag.
func Patterns(prefix string) []string {
	return []string{"~" + prefix + ":*", "&" + prefix + ":*"}
}
