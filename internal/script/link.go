package script

import (
	"regexp"
	"strings"
)

// Every call of a script runs its whole text: each top-level
// `local function` of a library it starts with makes a closure, every call,
// used or not. With the shared libraries in front of it, that was about a
// third of an ack call's cost in Redis (callgrind: 51,000 instructions a
// call, 33,000 with only the helper it uses). So a script carries only the
// library definitions its own text reaches, directly or through other
// definitions; the libraries are still written, and tested, once.

var (
	// definition matches the first line of a top-level definition: a local
	// function or one or more locals assigned on that line.
	definition = regexp.MustCompile(`^local\s+(?:function\s+([A-Za-z_]\w*)\s*\(|([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=)`)
	identifier = regexp.MustCompile(`[A-Za-z_]\w*`)
	quoted     = regexp.MustCompile(`'[^'\\]*'|"[^"\\]*"`)
)

// chunk is one top-level piece of a library: a definition with the comment
// lines just above it, or anything else (kept whatever the script uses).
type chunk struct {
	text  string
	names []string // the names it defines; nil for a chunk always kept
}

// link returns the definitions of libs that body reaches, in the libraries'
// order, followed by body. A definition is dropped only when it is one a
// line-based reading can delimit for sure: a local function whose last code
// line is a bare "end", or a local assigned on a single line. Anything else
// is kept, and so are the definitions it names; a name that appears only in
// a comment or a string keeps its definition too. Reading too much keeps a
// definition in vain; nothing is ever dropped that the text names.
func link(body string, libs ...string) string {
	chunks := split(strings.Join(libs, "\n"))
	byName := make(map[string][]int)
	keep := make([]bool, len(chunks))
	var todo []string
	for i, c := range chunks {
		if c.names == nil {
			keep[i] = true
			todo = append(todo, refs(c.text)...)
			continue
		}
		for _, n := range c.names {
			byName[n] = append(byName[n], i)
		}
	}
	todo = append(todo, refs(body)...)
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, i := range byName[n] {
			if !keep[i] {
				keep[i] = true
				todo = append(todo, refs(chunks[i].text)...)
			}
		}
	}
	var b strings.Builder
	for i, c := range chunks {
		if keep[i] {
			b.WriteString(c.text)
		}
	}
	b.WriteString(body)
	return b.String()
}

// split cuts a library's text into chunks at the first line of each
// top-level definition (or the comment block right above it).
func split(lib string) []chunk {
	lines := strings.SplitAfter(lib, "\n")
	var (
		chunks []chunk
		cur    []string
		names  []string // of cur; nil when cur is not one definition
	)
	flush := func() {
		if len(cur) == 0 {
			return
		}
		text := strings.Join(cur, "")
		if names != nil && !delimited(cur) {
			names = nil
		}
		chunks = append(chunks, chunk{text: text, names: names})
		cur, names = nil, nil
	}
	comments := 0 // comment and blank lines at the end of cur: they go with the next definition
	for _, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch m := definition.FindStringSubmatch(line); {
		case m != nil:
			head := cur[len(cur)-comments:]
			cur = cur[:len(cur)-comments]
			flush()
			cur = append(append(cur, head...), line)
			names = definedNames(m)
			comments = 0
		case trimmed == "" || strings.HasPrefix(trimmed, "--"):
			cur = append(cur, line)
			comments++
		default:
			cur = append(cur, line)
			comments = 0
		}
	}
	flush()
	return chunks
}

// definedNames returns the names a definition line's match defines.
func definedNames(m []string) []string {
	if m[1] != "" {
		return []string{m[1]}
	}
	var names []string
	for _, n := range strings.Split(m[2], ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return names
}

// delimited reports whether a definition's lines can be dropped whole: a
// local function whose last code line is "end" at the left margin, or a
// one-line local assignment that opens no block.
func delimited(lines []string) bool {
	var code []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "--") {
			code = append(code, l)
		}
	}
	if len(code) == 0 {
		return false
	}
	first := code[0]
	if strings.HasPrefix(first, "local function") {
		return strings.TrimRight(code[len(code)-1], " \t\r\n") == "end"
	}
	if len(code) != 1 {
		return false
	}
	first = quoted.ReplaceAllString(first, "''")
	for _, opens := range []string{"function", "{", "[[", "(", " do", " then"} {
		if strings.Contains(first, opens) {
			return false
		}
	}
	return true
}

// refs returns the identifiers of text's code lines (whole-line comments
// left out).
func refs(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			continue
		}
		out = append(out, identifier.FindAllString(l, -1)...)
	}
	return out
}
