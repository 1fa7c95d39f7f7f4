package script_test

import (
	"sort"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	// Every package that builds scripts with libraries, so that their
	// package-level scripts register with script.Linked.
	_ "github.com/conveyorq/conveyor/broker/list"
	_ "github.com/conveyorq/conveyor/broker/stream"
	_ "github.com/conveyorq/conveyor/internal/discards"
	_ "github.com/conveyorq/conveyor/internal/timers"

	"github.com/conveyorq/conveyor/internal/script"
)

// minLinked is fewer than the scripts built with libraries today; the test
// fails below it so that it cannot pass with nothing registered.
const minLinked = 20

// TestLinkedReadsNoNewGlobals checks that linking never leaves a script
// naming a library definition it no longer carries: such a name would
// compile to a global read (or write) that the unlinked text does not have.
func TestLinkedReadsNoNewGlobals(t *testing.T) {
	all := script.Linked()
	if len(all) < minLinked {
		t.Fatalf("%d scripts registered with libraries, want at least %d: is a package missing from the blank imports?", len(all), minLinked)
	}
	seen := make(map[string]bool)
	for _, s := range all {
		if seen[s.Name] {
			t.Errorf("script %s registered twice", s.Name)
		}
		seen[s.Name] = true
		full, err := globals(s.Name+" (full)", s.Full)
		if err != nil {
			t.Errorf("script %s: full text: %v", s.Name, err)
			continue
		}
		linked, err := globals(s.Name+" (linked)", s.Linked)
		if err != nil {
			t.Errorf("script %s: linked text: %v", s.Name, err)
			continue
		}
		for _, kind := range []string{"reads", "writes"} {
			for _, n := range sorted(linked[kind]) {
				if !full[kind][n] {
					t.Errorf("script %s: linked text %s global %q, which the full text does not (a library definition dropped by link?)", s.Name, kind, n)
				}
			}
		}
	}
	t.Logf("%d scripts checked", len(all))
}

// TestLinkPrunes checks that linking does drop definitions: list.ack uses
// a small part of its library. Full is what link returns keeping every
// definition, so a shorter Linked means something was dropped.
func TestLinkPrunes(t *testing.T) {
	const name = "list.ack"
	for _, s := range script.Linked() {
		if s.Name != name {
			continue
		}
		if len(s.Linked) >= len(s.Full) {
			t.Errorf("script %s: linked text is %d bytes, full text %d: nothing pruned", name, len(s.Linked), len(s.Full))
		}
		return
	}
	t.Fatalf("script %s not registered", name)
}

// globals compiles src and returns the global names its functions, nested
// ones included, read ("reads": GETGLOBAL) and write ("writes": SETGLOBAL).
func globals(name, src string) (map[string]map[string]bool, error) {
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{"reads": {}, "writes": {}}
	var walk func(p *lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, inst := range p.Code {
			var kind string
			switch int(inst >> 26) { // the opcode: the top 6 bits
			case lua.OP_GETGLOBAL:
				kind = "reads"
			case lua.OP_SETGLOBAL:
				kind = "writes"
			default:
				continue
			}
			bx := int(inst & 0x3ffff) // the constant index: the low 18 bits
			out[kind][p.Constants[bx].String()] = true
		}
		for _, sub := range p.FunctionPrototypes {
			walk(sub)
		}
	}
	walk(proto)
	return out, nil
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
