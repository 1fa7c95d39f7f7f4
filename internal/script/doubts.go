package script

import (
	"errors"
	"sync"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
)

// Doubts remembers the deliveries a settle (ack, retry, discard, release)
// was sent for without an answer: the connection broke or the deadline
// passed after the script may have run. When a later settle of such a
// delivery finds its lease gone, and the driver's scripts can tell that no
// one took the lease over (it was settled, not reclaimed: the script
// replies "gone" rather than "lease lost"), the earlier settle is what
// ended it, and the later one is reported as landed. A lease taken over
// stays ErrLeaseLost. The zero value is ready to use.
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

// Resolve turns err, the outcome of a settle of the delivery with receipt,
// into nil when err is ErrLeaseLost, the script found the lease gone
// without anyone taking it over (gone), and an earlier settle of the
// delivery was sent without an answer: that earlier settle landed.
//
// Only the script's verdict on the lease resolves the doubt. A try that
// gets none says nothing about the earlier settle, so its doubt stays for
// the next try: one whose connection could not be made (Redis down), one
// Redis refused without running it (LOADING while it restarts, BUSY), one
// whose outcome is unknown again, or an error a script raised part way (a
// command its user may not run). Keeping the doubt is safe there too: a
// later try finds the lease gone with no takeover only when a settle of
// this delivery ended it.
func (d *Doubts) Resolve(receipt string, gone bool, err error) error {
	if !errors.Is(err, broker.ErrLeaseLost) {
		// nil: settled now, so the earlier settle did not land; a doubt
		// left behind is harmless (the map is bounded).
		return err
	}
	d.mu.Lock()
	_, doubted := d.m[receipt]
	if doubted {
		delete(d.m, receipt)
	}
	d.mu.Unlock()
	if doubted && gone {
		return nil
	}
	return err
}

// HandedBack reads err, the outcome of a Release of n deliveries that a
// consumer hands back on its own (a lost fetch's): it returns how many
// were released, and err unless each failure in it is ErrLeaseLost (a
// lease reclaimed meanwhile is not the consumer's to hand back), which
// leaves the rest to try again.
func HandedBack(n int, err error) (int, error) {
	var merr *multierror.Error
	if !errors.As(err, &merr) {
		if err != nil {
			return 0, err
		}
		return n, nil
	}
	for _, e := range merr.Errors {
		if !errors.Is(e, broker.ErrLeaseLost) {
			return n - len(merr.Errors), err
		}
	}
	return n - len(merr.Errors), nil
}
