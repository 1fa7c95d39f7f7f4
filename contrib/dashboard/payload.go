package dashboard

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxShownPayload caps the payload bytes a job's page shows.
const maxShownPayload = 64 << 10

// shownPayload is a payload as a job's page shows it. Text is plain text:
// the template escapes it.
type shownPayload struct {
	Text string
	// Size is the payload's size in bytes; Hidden how many of them are not
	// shown.
	Size, Hidden int
	// Form says how Text shows the bytes: "json" (indented), "text" or
	// "quoted" (a Go string literal: invalid UTF-8 or control characters).
	Form string
}

// showPayload makes p readable: JSON indented when it is JSON and whole,
// text as it is, anything else quoted, at most maxShownPayload bytes.
func showPayload(p []byte) shownPayload {
	shown := p[:min(len(p), maxShownPayload)]
	out := shownPayload{Size: len(p), Hidden: len(p) - len(shown)}
	var b bytes.Buffer
	switch {
	case out.Hidden == 0 && json.Valid(p) && json.Indent(&b, p, "", "  ") == nil:
		out.Text, out.Form = b.String(), "json"
	case utf8.Valid(shown) && !bytes.ContainsFunc(shown, func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' && r != '\t' }):
		out.Text, out.Form = string(shown), "text"
	default:
		out.Text, out.Form = strconv.Quote(string(shown)), "quoted"
	}
	return out
}
