package script_test

import (
	"context"
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

// TestFunctionRefusedRunsByEvalsha: a user who may not run FCALL gets the
// script by EVALSHA, and the client does not ask again at every call.
func TestFunctionRefusedRunsByEvalsha(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := script.New("test.fn_refused", "return twice(ARGV[1])", fnLib).AsFunction("allow-oom")
	prefix := redistest.Prefix(t)
	_, rdb := redistest.ACLUser(t, redistest.Without(redistest.LeastPrivilege(prefix), "+fcall")...)
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
