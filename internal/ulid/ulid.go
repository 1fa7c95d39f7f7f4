// Package ulid makes the IDs Conveyor gives messages: 26 characters of
// Crockford base32 holding a 48-bit millisecond timestamp and 80 random bits,
// so IDs sort by creation time (to the millisecond) and never collide in
// practice.
package ulid

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Entropy comes from a buffered crypto/rand source: one read per 512 IDs
// keeps crypto/rand off the enqueue hot path.
var (
	mu   sync.Mutex
	pool [10 * 512]byte
	used = len(pool)
)

// New returns a new ID for time t.
func New(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	mu.Lock()
	if used == len(pool) {
		if _, err := rand.Read(pool[:]); err != nil {
			mu.Unlock()
			panic("ulid: crypto/rand failed: " + err.Error()) // the runtime guarantees it does not
		}
		used = 0
	}
	copy(b[6:], pool[used:used+10])
	used += 10
	mu.Unlock()
	return encode(b)
}

// encode writes the 128 bits as 26 base32 digits, most significant first
// (the top two bits of the first digit are always zero).
func encode(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
