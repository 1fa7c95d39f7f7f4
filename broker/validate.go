package broker

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen caps queue names, message IDs and kinds, in bytes.
const MaxNameLen = 128

// ValidateQueue reports whether name can be used as a queue name: 1 to
// MaxNameLen bytes of valid UTF-8 with no control characters, no spaces and
// no braces (a brace would change the queue's Redis Cluster hash slot).
func ValidateQueue(name string) error {
	if reason := checkName(name); reason != "" {
		return &QueueNameError{Name: name, Reason: reason}
	}
	return nil
}

// ValidateMessage checks the fields a driver relies on: the queue name, an ID
// and a kind that obey the same rules as queue names.
func ValidateMessage(m *Message) error {
	if err := ValidateQueue(m.Queue); err != nil {
		return err
	}
	if reason := checkName(m.ID); reason != "" {
		return &MessageError{ID: m.ID, Field: "ID", Reason: reason}
	}
	if reason := checkName(m.Kind); reason != "" {
		return &MessageError{ID: m.ID, Field: "Kind", Reason: reason}
	}
	if m.Retries < 0 || m.Recoveries < 0 || m.MaxAttempts < 0 || m.Timeout < 0 {
		return &MessageError{ID: m.ID, Field: "counters", Reason: "negative"}
	}
	if m.UniqueKey != "" {
		if reason := checkName(m.UniqueKey); reason != "" {
			return &MessageError{ID: m.ID, Field: "UniqueKey", Reason: reason}
		}
		if m.UniqueTTL < time.Millisecond {
			return &MessageError{ID: m.ID, Field: "UniqueTTL", Reason: "under 1ms with a UniqueKey"}
		}
	}
	if m.Group != "" {
		if reason := checkName(m.Group); reason != "" {
			return &MessageError{ID: m.ID, Field: "Group", Reason: reason}
		}
		if m.GroupLimit < 0 || m.GroupLimit > MaxGroupLimit {
			return &MessageError{ID: m.ID, Field: "GroupLimit", Reason: fmt.Sprintf("%d, want 0 to %d", m.GroupLimit, MaxGroupLimit)}
		}
		if !m.RunAt.IsZero() && m.RunAt.After(time.Now()) {
			return &MessageError{ID: m.ID, Field: "Group", Reason: "a grouped message cannot be delayed: enqueue it when it is due"}
		}
	} else if m.GroupLimit != 0 {
		return &MessageError{ID: m.ID, Field: "GroupLimit", Reason: "set without a Group"}
	}
	return nil
}

func checkName(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxNameLen:
		return "longer than 128 bytes"
	}
	if reason, ok := checkASCII(s); ok && (reason == "" || utf8.ValidString(s)) {
		return reason
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	return checkRunes(s)
}

// checkASCII gives checkRunes' verdict on a name of ASCII bytes only, the
// usual case, byte by byte (tab, newline and the like are control
// characters, checked before white space there too), at a fraction of its
// cost, which showed in profiles of EnqueueMany: every message's ID, kind
// and queue are checked by the client and again by the driver. ok is false
// when s has a byte outside ASCII.
func checkASCII(s string) (reason string, ok bool) {
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= utf8.RuneSelf:
			return "", false
		case b == '{' || b == '}':
			return "contains a brace", true
		case b < 0x20 || b == 0x7f:
			return "contains a control character", true
		case b == ' ':
			return "contains white space", true
		}
	}
	return "", true
}

// checkRunes checks the characters of a valid UTF-8 name.
func checkRunes(s string) string {
	for _, r := range s {
		switch {
		case r == '{' || r == '}':
			return "contains a brace"
		case unicode.IsControl(r):
			return "contains a control character"
		case unicode.IsSpace(r):
			return "contains white space"
		}
	}
	return ""
}

// ValidateBatch checks every message of a batch with ValidateMessage (a nil
// message is invalid too) and reports whether they all name one queue. A
// driver's Enqueue calls it first, so that an invalid message stores nothing.
// The error names the message by its index in msgs ("message 3: ..."), as
// its ID may be one a client generated and the caller never saw; errors.As
// still finds the *MessageError or *QueueNameError.
func ValidateBatch(msgs []*Message) (oneQueue bool, err error) {
	oneQueue = true
	for i, m := range msgs {
		if m == nil {
			return false, &MessageError{Field: "message " + strconv.Itoa(i), Reason: "nil"}
		}
		if err := ValidateMessage(m); err != nil {
			return false, fmt.Errorf("message %d: %w", i, err)
		}
		oneQueue = oneQueue && m.Queue == msgs[0].Queue
	}
	return oneQueue, nil
}

// GroupByQueue splits msgs by queue, queues in order of first appearance and
// each queue's messages in their order.
func GroupByQueue(msgs []*Message) [][]*Message {
	index := make(map[string]int)
	var groups [][]*Message
	for _, m := range msgs {
		i, ok := index[m.Queue]
		if !ok {
			i = len(groups)
			index[m.Queue] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], m)
	}
	return groups
}
