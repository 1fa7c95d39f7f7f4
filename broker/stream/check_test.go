package stream

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCheckAsksForEveryScriptCommand: Check asks the ACL for every command
// the stream driver's scripts send (the shared timer and discard scripts'
// list-only branches push with LPUSH, which the discard list needs too;
// the concurrency limits' list-only branch pushes with RPUSH, which no
// stream script reaches).
func TestCheckAsksForEveryScriptCommand(t *testing.T) {
	t.Parallel()
	have := neededCommands(t)
	redistest.ScriptsCovered(t, have, []string{"RPUSH"},
		"lua", "../../internal/timers/lua", "../../internal/discards/lua", "../../internal/inspect/lua", "../../internal/reclaims/lua",
		"../../internal/cancels/lua", "../../internal/records/lua", "../../internal/groups/lua", "../../internal/limits/lua")
}

// neededCommands returns the commands Check asks for.
func neededCommands(t *testing.T) []string {
	d, err := New(redistest.Client(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, n := range d.needs() {
		have = append(have, n.Cmd)
	}
	return have
}

// direct maps the go-redis methods the driver calls outside its scripts
// to the command each sends, as Check names it.
var direct = map[string]string{
	"XReadGroup":     "XREADGROUP",
	"XRead":          "XREAD",
	"XGroupCreate":   "XGROUP CREATE",
	"XPendingExt":    "XPENDING",
	"Exists":         "EXISTS",
	"XInfoConsumers": "XINFO CONSUMERS",
	"ZAdd":           "ZADD",
	"XInfoGroups":    "XINFO GROUPS",
	"XRevRangeN":     "XREVRANGE",
}

// directCall matches a go-redis method called on the driver's client
// (d.rdb.X(...), c.d.rdb.X(...), or a pipeline p built from it) and a
// command built by hand (redis.NewCmd(ctx, "xadd", ...)).
var (
	directCall = regexp.MustCompile(`\brdb\.([A-Z][A-Za-z]*)\(|\bp\.([A-Z][A-Za-z]*)\(`)
	handCmd    = regexp.MustCompile(`redis\.New[A-Za-z]*Cmd\(ctx, "([a-z]+)"`)
)

// TestCheckAsksForEveryDirectCommand: Check asks the ACL for every command
// the stream driver sends outside its scripts too (the wait on a missing
// stream's creation is an XREAD), found in the package's Go source.
func TestCheckAsksForEveryDirectCommand(t *testing.T) {
	t.Parallel()
	have := neededCommands(t)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cmds []string
		for _, m := range directCall.FindAllStringSubmatch(string(src), -1) {
			method := m[1] + m[2]
			switch method {
			case "Pipeline", "Process", "Exec", "Discard", "Result", "Err", "Val":
				continue // no command of its own
			}
			cmd, ok := direct[method]
			if !ok {
				t.Errorf("%s calls rdb.%s: add the command it sends to the table direct and to Check's needs", f, method)
				continue
			}
			cmds = append(cmds, cmd)
		}
		for _, m := range handCmd.FindAllStringSubmatch(string(src), -1) {
			cmds = append(cmds, strings.ToUpper(m[1]))
		}
		for _, cmd := range cmds {
			seen++
			if !slices.Contains(have, cmd) {
				t.Errorf("%s sends %s, which Check does not ask for", f, cmd)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no direct command found in the package's source")
	}
}

// TestCheckNamesMissingXREAD: a user allowed everything but XREAD (which an
// idle consumer sends while its queue's stream does not exist) fails Check,
// and the error names XREAD.
func TestCheckNamesMissingXREAD(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	_, c := redistest.ACLUser(t, append(redistest.LeastPrivilege(prefix), "-xread")...)
	d, err := New(c, &Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Check(context.Background())
	if err == nil || !regexp.MustCompile(`\bXREAD\b`).MatchString(err.Error()) {
		t.Fatalf("Check as a user without XREAD = %v, want an error naming XREAD", err)
	}
}
