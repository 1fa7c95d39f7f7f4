package script

import (
	"strings"
	"testing"
)

const testLib = `-- lib: a header comment, kept
local CHUNK = 1000

-- used: calls helper
local function used(x)
  return helper(x) + CHUNK
end

-- helper: reached only through used
local function helper(x)
  return x
end

-- unused: nothing names it
local function unused()
  return 1
end

local PATTERN = '^1,(%d+),'

local TABLE = {
  a = 1,
}

local function open_ended()
  if true then return 1 end
  -- no bare end on the last code line
  return 2 end
`

func TestLinkKeepsWhatTheBodyReaches(t *testing.T) {
	out := link("return used(1)\n", testLib)
	for _, want := range []string{"local CHUNK = 1000", "local function used(x)", "local function helper(x)", "-- helper: reached only through used", "local TABLE = {", "local function open_ended()", "return used(1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("linked text lacks %q:\n%s", want, out)
		}
	}
	for _, gone := range []string{"local function unused()", "-- unused: nothing names it", "local PATTERN"} {
		if strings.Contains(out, gone) {
			t.Errorf("linked text keeps %q, which nothing reaches:\n%s", gone, out)
		}
	}
	if strings.Index(out, "local function used(") > strings.Index(out, "local function helper(") {
		t.Errorf("definitions out of the library's order:\n%s", out)
	}
	if !strings.HasSuffix(out, "return used(1)\n") {
		t.Errorf("body is not last:\n%s", out)
	}
}

func TestLinkIgnoresWholeLineComments(t *testing.T) {
	out := link("-- see unused\nreturn 1\n", testLib)
	if strings.Contains(out, "local function unused()") {
		t.Errorf("a name in a comment line of the body kept its definition:\n%s", out)
	}
	// A trailing comment counts: reading too much is the safe side.
	out = link("return 1 -- PATTERN\n", testLib)
	if !strings.Contains(out, "local PATTERN") {
		t.Errorf("a name after code on a line did not keep its definition:\n%s", out)
	}
}

func TestLinkSeveralNamesOnOneLine(t *testing.T) {
	lib := "local A, B = 1, 2\nlocal C = 3\n"
	out := link("return B\n", lib)
	if !strings.Contains(out, "local A, B = 1, 2") || strings.Contains(out, "local C") {
		t.Errorf("linked text:\n%s", out)
	}
}
