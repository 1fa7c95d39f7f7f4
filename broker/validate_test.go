package broker

import (
	"errors"
	"strings"
	"testing"
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
