// Package codec encodes a broker.Message as the single string Conveyor keeps
// in Redis.
//
// The encoding starts with a short text header that Lua scripts can read and
// rewrite with string patterns alone (no cjson/cmsgpack, so the scripts run
// on miniredis too):
//
//	1,<deliveries>,<attempt>,<recoveries>,<len(id)>:<id><body>
//
// deliveries is the list driver's fencing token: the number of the
// message's next (or, while leased, current) delivery; the list driver's
// scripts add one whenever a message goes back to its queue. attempt and
// recoveries are broker.Message's counters. body is binary: uvarint
// lengths and values, see appendBody. Nothing in the body is read by Lua.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/conveyorq/conveyor/broker"
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("conveyor: malformed stored message")

const version = '1'

// maxTimeoutMs is the longest Timeout a time.Duration holds, in ms (about
// 292 years).
const maxTimeoutMs = uint64(math.MaxInt64 / time.Millisecond)

// Header is the part of an encoded message that scripts read and rewrite.
type Header struct {
	Deliveries int
	Retries    int
	Recoveries int
	ID         string
}

// Encode returns the stored form of m with the given delivery count.
func Encode(m *broker.Message, deliveries int) []byte {
	return Append(make([]byte, 0, Size(m)), m, deliveries)
}

// Size estimates the length of m's stored form, headers not counted: a
// capacity that usually spares Append a reallocation.
func Size(m *broker.Message) int {
	return 48 + len(m.ID) + len(m.Kind) + len(m.Payload)
}

// Append appends the stored form of m with the given delivery count to b,
// so that a batch can share one buffer instead of allocating per message.
func Append(b []byte, m *broker.Message, deliveries int) []byte {
	b = append(b, version, ',')
	b = strconv.AppendInt(b, int64(deliveries), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(m.Retries), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(m.Recoveries), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(len(m.ID)), 10)
	b = append(b, ':')
	b = append(b, m.ID...)
	return appendBody(b, m)
}

// body layout, in order: kind (len+bytes), payload (len+bytes), enqueuedAt
// (unix ms), maxAttempts, timeout (ms), header count, then each header's key
// and value (len+bytes). Decode refuses a maxAttempts past int's range and a
// timeout past time.Duration's.
func appendBody(b []byte, m *broker.Message) []byte {
	b = appendBytes(b, m.Kind)
	b = appendBytes(b, m.Payload)
	var enq int64
	if !m.EnqueuedAt.IsZero() {
		enq = m.EnqueuedAt.UnixMilli()
	}
	b = binary.AppendVarint(b, enq)
	b = binary.AppendUvarint(b, uint64(m.MaxAttempts))
	b = binary.AppendUvarint(b, uint64(m.Timeout/time.Millisecond))
	// A Group travels as the header broker.HeaderGroup (which it wins
	// over), so that whoever decodes the message knows its group.
	n := len(m.Headers)
	if m.Group != "" {
		if _, ok := m.Headers[broker.HeaderGroup]; !ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, v := range m.Headers {
		if k == broker.HeaderGroup && m.Group != "" {
			continue
		}
		b = appendBytes(b, k)
		b = appendBytes(b, v)
	}
	if m.Group != "" {
		b = appendBytes(b, broker.HeaderGroup)
		b = appendBytes(b, m.Group)
	}
	return b
}

func appendBytes[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeString is Decode of a stored message held as a string (a Redis
// reply), read in place rather than copied to a byte slice first. What m
// keeps is copied all the same: a string sharing the reply's memory (a
// job's ID kept in a cache, say) would keep the whole message, payload and
// all, alive.
func DecodeString(s string, m *broker.Message) (deliveries int, err error) {
	return Decode(unsafe.Slice(unsafe.StringData(s), len(s)), m)
}

// Decode parses a stored message into m (Queue is left as it is) and returns
// its delivery count.
func Decode(data []byte, m *broker.Message) (deliveries int, err error) {
	h, n, err := ParseHeader(data)
	if err != nil {
		return 0, err
	}
	m.ID, m.Retries, m.Recoveries = h.ID, h.Retries, h.Recoveries
	r := reader{b: data[n:]}
	m.Kind = string(r.bytes())
	if p := r.bytes(); len(p) > 0 {
		m.Payload = append([]byte(nil), p...)
	} else {
		m.Payload = nil
	}
	if enq := r.varint(); enq != 0 {
		m.EnqueuedAt = time.UnixMilli(enq)
	}
	// Values past int's or time.Duration's range would decode negative
	// (or re-encode differently): only a hand-written value holds them.
	maxAttempts, timeoutMs := r.uvarint(), r.uvarint()
	if maxAttempts > math.MaxInt {
		return 0, fmt.Errorf("%w: max attempts %d out of range", ErrMalformed, maxAttempts)
	}
	if timeoutMs > maxTimeoutMs {
		return 0, fmt.Errorf("%w: timeout %dms out of range", ErrMalformed, timeoutMs)
	}
	m.MaxAttempts = int(maxAttempts)
	m.Timeout = time.Duration(timeoutMs) * time.Millisecond
	nh := r.uvarint()
	if nh > uint64(len(r.b)) { // each header takes at least two bytes
		return 0, fmt.Errorf("%w: header count %d", ErrMalformed, nh)
	}
	m.Headers, m.Group = nil, ""
	if nh > 0 {
		m.Headers = make(map[string]string, nh)
		for i := uint64(0); i < nh; i++ {
			k := string(r.bytes())
			m.Headers[k] = string(r.bytes())
		}
		m.Group = m.Headers[broker.HeaderGroup]
	}
	if r.err != nil {
		return 0, fmt.Errorf("%w: %v", ErrMalformed, r.err)
	}
	if len(r.b) != 0 {
		return 0, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.b))
	}
	return h.Deliveries, nil
}

// ParseHeader reads the text header and returns it with its length in bytes.
func ParseHeader(data []byte) (Header, int, error) {
	var h Header
	if len(data) < 2 || data[0] != version || data[1] != ',' {
		return h, 0, fmt.Errorf("%w: unknown version", ErrMalformed)
	}
	i := 2
	var fields [4]int
	for f := range fields {
		stop := byte(',')
		if f == len(fields)-1 {
			stop = ':'
		}
		start := i
		for i < len(data) && data[i] != stop {
			if data[i] < '0' || data[i] > '9' || i-start > 9 {
				return h, 0, fmt.Errorf("%w: bad header number", ErrMalformed)
			}
			i++
		}
		if i == start || i == len(data) {
			return h, 0, fmt.Errorf("%w: short header", ErrMalformed)
		}
		fields[f], _ = strconv.Atoi(string(data[start:i]))
		i++
	}
	idLen := fields[3]
	if idLen > len(data)-i {
		return h, 0, fmt.Errorf("%w: id length %d", ErrMalformed, idLen)
	}
	h = Header{Deliveries: fields[0], Retries: fields[1], Recoveries: fields[2], ID: string(data[i : i+idLen])}
	return h, i + idLen, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("length %d past end", n)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
