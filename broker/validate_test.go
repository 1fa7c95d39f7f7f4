package broker

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGroupByQueueKeepsOrder(t *testing.T) {
	t.Parallel()
	var msgs []*Message
	for i, q := range []string{"b", "a", "b", "c", "a"} {
		msgs = append(msgs, &Message{ID: string(rune('0' + i)), Queue: q})
	}
	var got []string
	for _, g := range GroupByQueue(msgs) {
		var ids []string
		for _, m := range g {
			ids = append(ids, m.Queue+m.ID)
		}
		got = append(got, strings.Join(ids, ","))
	}
	if strings.Join(got, " ") != "b0,b2 a1,a4 c3" {
		t.Fatalf("groups %v", got)
	}
}

func TestValidateBatch(t *testing.T) {
	t.Parallel()
	ok := &Message{ID: "1", Kind: "k", Queue: "q"}
	other := &Message{ID: "2", Kind: "k", Queue: "r"}
	if one, err := ValidateBatch([]*Message{ok, ok}); err != nil || !one {
		t.Fatalf("one queue: %v %v", one, err)
	}
	if one, err := ValidateBatch([]*Message{ok, other}); err != nil || one {
		t.Fatalf("two queues: %v %v", one, err)
	}
	if _, err := ValidateBatch([]*Message{ok, nil}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("nil message: %v", err)
	}
	var qe *QueueNameError
	if _, err := ValidateBatch([]*Message{ok, {ID: "3", Kind: "k", Queue: "a{b}"}}); !errors.As(err, &qe) {
		t.Fatalf("brace in queue: %v", err)
	}
}

// TestCheckASCIIAgreesWithRunes: the byte-wise check of ASCII names gives
// the rune-wise check's verdict for every ASCII byte, at every position.
func TestCheckASCIIAgreesWithRunes(t *testing.T) {
	t.Parallel()
	for b := 0; b < utf8.RuneSelf; b++ {
		for _, s := range []string{string(rune(b)), "a" + string(rune(b)), string(rune(b)) + "z", "ab" + string(rune(b)) + "cd"} {
			got, ok := checkASCII(s)
			if !ok {
				t.Fatalf("checkASCII(%q) says it is not ASCII", s)
			}
			if want := checkRunes(s); got != want {
				t.Errorf("checkASCII(%q) = %q, checkRunes = %q", s, got, want)
			}
		}
	}
	for _, s := range []string{"é", "a\u00a0b", "a\u0085b", "a\u2028b", "名前"} {
		if _, ok := checkASCII(s); ok {
			t.Errorf("checkASCII(%q) took a non-ASCII name", s)
		}
	}
	if got := checkName("a\u00a0b"); got != "contains white space" {
		t.Errorf("checkName(no-break space) = %q", got)
	}
	// Invalid UTF-8 is the reason even after an ASCII offender.
	for _, s := range []string{"a\x85b", "a{\xff", "a b\xff", "a\tb\xc3"} {
		if got := checkName(s); got != "not valid UTF-8" {
			t.Errorf("checkName(%q) = %q, want not valid UTF-8", s, got)
		}
	}
}
