package script

import (
	"errors"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Doubts remembers the deliveries a settle (ack, retry, discard, release)
// was sent for without an answer: the connection broke or the deadline
// passed after the script may have run. When a later settle of such a
// delivery finds its lease gone before the delivery's LeaseDeadline, the
// earlier settle is what ended it: nobody else can end a lease before it
// runs out (reclaiming waits for the server's deadline, which is never
// before LeaseDeadline), so the settle is reported as landed, not as a
// lost lease. After LeaseDeadline the lease may have been reclaimed, and
// ErrLeaseLost stands. The zero value is ready to use.
type Doubts struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// maxDoubts bounds the receipts remembered; past it the oldest doubts are
// forgotten all at once (a later settle of one then reports ErrLeaseLost,
// the conservative answer).
const maxDoubts = 1 << 16

// Note remembers receipt when err leaves its settle's outcome unknown.
func (d *Doubts) Note(receipt string, err error) {
	if !Unsure(err) {
		return
	}
	d.mu.Lock()
	if d.m == nil || len(d.m) >= maxDoubts {
		d.m = make(map[string]struct{})
	}
	d.m[receipt] = struct{}{}
	d.mu.Unlock()
}

// Resolve turns err, the outcome of a settle of the delivery with receipt
// and deadline, into nil when err is ErrLeaseLost, an earlier settle of it
// was sent without an answer and deadline has not passed: that earlier
// settle landed. Any answer from Redis resolves the doubt.
func (d *Doubts) Resolve(receipt string, deadline time.Time, err error) error {
	if err == nil || Unsure(err) {
		// A doubt left behind by a settle that now landed is harmless: the
		// delivery is settled, and the map is bounded.
		return err
	}
	d.mu.Lock()
	_, doubted := d.m[receipt]
	if doubted {
		delete(d.m, receipt)
	}
	d.mu.Unlock()
	if doubted && errors.Is(err, broker.ErrLeaseLost) && time.Now().Before(deadline) {
		return nil
	}
	return err
}
