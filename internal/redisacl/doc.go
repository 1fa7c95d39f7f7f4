// Package redisacl is the ACL a Conveyor process needs on Redis: the rules
// of the least-privilege user docs/redis-keys.md gives operators, in one
// place for the tests and the chaos suite, which build users from it.
// Driver.Check (internal/redischeck) asks the server for what a driver
// sends, which these rules must allow.
//
//	args := []any{"ACL", "SETUSER", "app", "reset", "on", ">" + secret}
//	for _, r := range redisacl.LeastPrivilege("conveyor") {
//		args = append(args, r)
//	}
//	err := admin.Do(ctx, args...).Err()
package redisacl
