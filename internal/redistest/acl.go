package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisacl"
)

// LeastPrivilege returns the ACL rules of the least-privilege user that
// docs/redis-keys.md (section ACL) gives operators, for the drivers' keys
// and channels under prefix (redisacl.LeastPrivilege). Tests build users
// from it, dropping or changing one rule to take one permission away. On a
// Cluster (see Options) the rules add CLUSTER SLOTS, with which go-redis
// learns the slot map.
func LeastPrivilege(prefix string) []string {
	rules := redisacl.LeastPrivilege(prefix)
	if IsCluster() {
		rules = append(rules, "+cluster|slots")
	}
	return rules
}

// Without returns rules less every rule in drop.
func Without(rules []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return slices.Contains(drop, r) })
}

// ACLUser creates an ACL user with a unique name, a random password and
// rules (after "reset on"), deletes it when t ends, and returns the user's
// name and a client that logs in as it. On a Cluster the user is set on
// every master.
func ACLUser(t testing.TB, rules ...string) (string, redis.UniversalClient) {
	t.Helper()
	admin := Client(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "cvt-acl-" + hex.EncodeToString(b[:4])
	pass := hex.EncodeToString(b[4:]) + "-pw"
	args := append([]any{"ACL", "SETUSER", name, "reset", "on", ">" + pass}, toAny(rules)...)
	onEach(t, admin, args...)
	t.Cleanup(func() { onEach(t, admin, "ACL", "DELUSER", name) })

	opts, _, err := Options()
	if err != nil {
		t.Fatal(err)
	}
	opts.Username, opts.Password = name, pass
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return name, c
}

// onEach runs one command on the server, or on every master of a Cluster.
func onEach(t testing.TB, c redis.UniversalClient, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Do(ctx, args...).Err() })
	} else {
		err = c.Do(ctx, args...).Err()
	}
	if err != nil {
		t.Fatalf("%v: %v", args[:2], err)
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// scriptCall matches a command a script sends by name: redis.call('X', ...),
// redis.pcall('X', ...) and the shared bulk('X', ...), with a subcommand of
// XGROUP and XINFO.
var scriptCall = regexp.MustCompile(`(?:redis\.p?call|\bbulk)\('([A-Z]+)'(?:,\s*'([A-Z]+)')?`)

// ScriptsCovered fails t for every command the Lua scripts in dirs send
// (see scriptCall) that is neither in have ("XGROUP CREATE" for a
// subcommand) nor in except: a driver's Check must ask for each one.
func ScriptsCovered(t testing.TB, have, except []string, dirs ...string) {
	t.Helper()
	seen := 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Lua scripts in %s (%v)", dir, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range scriptCall.FindAllStringSubmatch(string(src), -1) {
				cmd := m[1]
				if (cmd == "XGROUP" || cmd == "XINFO") && m[2] != "" {
					cmd += " " + m[2]
				}
				seen++
				if !slices.Contains(have, cmd) && !slices.Contains(except, cmd) {
					t.Errorf("%s sends %s, which Check does not ask for", f, cmd)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no command found in the scripts")
	}
}
