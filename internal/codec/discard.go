package codec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Discarded is an entry of a discard queue: the stored message as it was
// when discarded, why, and when.
type Discarded struct {
	At      time.Time
	Reason  string
	Message []byte // an encoded message, as Encode returns it
}

// A discard record is "d1,<unix ms>,<len(reason)>:<reason><message>". Lua
// builds it (the time comes from Redis TIME), Go reads it.

// DecodeDiscarded parses a discard record.
func DecodeDiscarded(rec []byte) (Discarded, error) {
	var d Discarded
	s := string(rec)
	rest, ok := strings.CutPrefix(s, "d1,")
	if !ok {
		return d, fmt.Errorf("%w: discard record version", ErrMalformed)
	}
	ms, rest, ok := strings.Cut(rest, ",")
	if !ok {
		return d, fmt.Errorf("%w: discard record time", ErrMalformed)
	}
	n, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return d, fmt.Errorf("%w: discard record reason", ErrMalformed)
	}
	at, err1 := strconv.ParseInt(ms, 10, 64)
	rl, err2 := strconv.Atoi(n)
	if err1 != nil || err2 != nil || rl < 0 || rl > len(rest) {
		return d, fmt.Errorf("%w: discard record header", ErrMalformed)
	}
	d.At = time.UnixMilli(at)
	d.Reason = rest[:rl]
	d.Message = []byte(rest[rl:])
	return d, nil
}
