package script_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// fnLib is a library for the test scripts: a helper the body calls.
const fnLib = "local function twice(s)\n  return s .. s\nend\n"

// onMasters runs f on every master of rdb (rdb itself when it is no
// cluster client).
func onMasters(t *testing.T, rdb redis.UniversalClient, f func(context.Context, redis.Cmdable) error) {
	t.Helper()
	ctx := context.Background()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) }); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := f(ctx, rdb); err != nil {
		t.Fatal(err)
	}
}

// names returns the commands of each round trip logged, flattened.
func names(log *drivertest.CmdLog) []string {
	var out []string
	for _, trip := range log.Take() {
		out = append(out, trip...)
	}
	return out
}

// TestFunctionLoadsOnFirstUse: a script made with AsFunction runs by FCALL;
// a server without its library gets it loaded, and the call made again,
// once; the next call is one FCALL.
func TestFunctionLoadsOnFirstUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := script.New("test.fn_first_use", "return {twice(KEYS[1]), twice(ARGV[1])}", fnLib).AsFunction("allow-oom")
	rdb := redistest.NewClient(t)
	script.EnableFunctions(rdb)
	onMasters(t, rdb, func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionDelete(ctx, s.Function()).Err()
		if err != nil && !strings.Contains(err.Error(), "not found") {
			return err
		}
		return nil
	})
	h := &drivertest.CmdLog{}
	rdb.AddHook(h)
	key := redistest.Prefix(t) + ":{fn}:k"
	for round := range 2 {
		v, err := s.Run(ctx, rdb, []string{key}, "a")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		got, _ := v.([]any)
		if len(got) != 2 || got[0] != key+key || got[1] != "aa" {
			t.Fatalf("round %d: reply %v, want [%s%s aa]", round, v, key, key)
		}
	}
	want := []string{"fcall", "function", "fcall", "fcall"}
	if got := names(h); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("commands sent %v, want %v: a failed FCALL, the load, the call again, then one FCALL", got, want)
	}
}

// TestFunctionRefusedRunsByEvalsha: a user who may not run FCALL (here one
// who may load functions, not call them) gets the script by EVALSHA, and
// the client does not ask again at every call.
func TestFunctionRefusedRunsByEvalsha(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := script.New("test.fn_refused", "return twice(ARGV[1])", fnLib).AsFunction("allow-oom")
	prefix := redistest.Prefix(t)
	_, rdb := redistest.ACLUser(t, append(redistest.LeastPrivilege(prefix), "+function|load")...)
	script.EnableFunctions(rdb)
	h := &drivertest.CmdLog{}
	rdb.AddHook(h)
	for round := range 2 {
		v, err := s.Run(ctx, rdb, []string{prefix + ":{fn}:k"}, "b")
		if err != nil || v != "bb" {
			t.Fatalf("round %d: Run = %v, %v; want bb", round, v, err)
		}
	}
	got := strings.Join(names(h), " ")
	if got != "fcall evalsha evalsha" && got != "fcall evalsha eval evalsha" {
		t.Errorf("commands sent %q, want one refused FCALL, then EVALSHA (EVAL after a NOSCRIPT) each call", got)
	}
}

// TestFunctionErrorsOfItsOwnAreNotRunAgain: an error a function raises
// itself, here a command its user may not run, is the call's outcome; the
// script does not run a second time by EVALSHA (its writes before the
// error would be made twice).
func TestFunctionErrorsOfItsOwnAreNotRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := script.New("test.fn_own_error", "redis.call('INCR', KEYS[1])\nredis.call('ZADD', KEYS[2], 1, 'm')\nreturn twice('x')", fnLib).AsFunction("allow-oom")
	prefix := redistest.Prefix(t)
	_, rdb := redistest.ACLUser(t, append(redistest.LeastPrivilege(prefix), "+fcall", "+function|load", "-zadd")...)
	script.EnableFunctions(rdb)
	n, z := prefix+":{fn}:n", prefix+":{fn}:z"
	if _, err := s.Run(ctx, rdb, []string{n, z}); err == nil {
		t.Fatal("Run without ZADD permission succeeded")
	}
	if got, err := redistest.Client(t).Get(ctx, n).Result(); err != nil || got != "1" {
		t.Fatalf("the counter the script increments before its refused ZADD = %q, %v; want 1 (one run)", got, err)
	}
}

// TestNoFunctionsTellsARefusedCallFromAFunctionsOwnError: only a refusal
// of FCALL or FUNCTION itself sends a script to EVALSHA.
func TestNoFunctionsTellsARefusedCallFromAFunctionsOwnError(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		"NOPERM this user has no permissions to run the 'fcall' command":                                          true,
		"NOPERM this user has no permissions to run the 'function|load' command":                                  true,
		"ERR unknown command 'fcall', with args beginning with: 'conveyor_0'":                                     true,
		"ERR unknown command `fcall`, with args beginning with: `conveyor_0`, ":                                   true,
		"ERR unknown subcommand 'load'. Try FUNCTION HELP.":                                                       true,
		"ERR The user executing the script can't run this command or subcommand script: tz, on @user_function:2.": false,
		"NOPERM this user has no permissions to run the 'zadd' command script: tz, on @user_function:2.":          false,
		"NOPERM this user has no permissions to access one of the keys used as arguments":                         false,
		"ERR Function not found": false,
	} {
		if got := script.NoFunctions(replyError(msg)); got != want {
			t.Errorf("noFunctions(%q) = %v, want %v", msg, got, want)
		}
	}
}

// replyError is an error reply from Redis (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }

func (replyError) RedisError() {}

// TestFunctionsAreOptIn: a client not given to EnableFunctions runs a
// script made with AsFunction by EVALSHA.
func TestFunctionsAreOptIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := script.New("test.fn_opt_in", "return twice(ARGV[1])", fnLib).AsFunction("allow-oom")
	rdb := redistest.NewClient(t)
	h := &drivertest.CmdLog{}
	rdb.AddHook(h)
	if v, err := s.Run(ctx, rdb, []string{redistest.Prefix(t) + ":{fn}:k"}, "c"); err != nil || v != "cc" {
		t.Fatalf("Run = %v, %v; want cc", v, err)
	}
	if got := strings.Join(names(h), " "); got != "evalsha" && got != "evalsha eval" {
		t.Errorf("commands sent %q, want EVALSHA (EVAL after a NOSCRIPT)", got)
	}
}

// TestFunctionLoadRefusedRunsByEvalsha: a full Redis refuses FUNCTION
// LOAD; the call then runs by EVALSHA, and so do the next ones for a
// while, without a load each.
func TestFunctionLoadRefusedRunsByEvalsha(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	rdb := srv.Client(t)
	script.EnableFunctions(rdb)
	fill := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if err := rdb.Set(ctx, fmt.Sprint("fill:", i), fill, 0).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatalf("filling Redis: %v", err)
			}
			break
		}
		if i > 10000 {
			t.Fatal("Redis never filled")
		}
	}
	h := &drivertest.CmdLog{}
	rdb.AddHook(h)
	s := script.New("test.fn_full", "return twice(ARGV[1])", fnLib).AsFunction("allow-oom")
	for round := range 2 {
		if v, err := s.Run(ctx, rdb, []string{"k"}, "d"); err != nil || v != "dd" {
			t.Fatalf("round %d: Run on a full Redis = %v, %v; want dd", round, v, err)
		}
	}
	got := strings.Join(names(h), " ")
	if got != "fcall function evalsha eval evalsha" && got != "fcall function evalsha evalsha" {
		t.Errorf("commands sent %q, want a failed FCALL, a refused load, then EVALSHA (EVAL after a NOSCRIPT) for both calls", got)
	}
}
