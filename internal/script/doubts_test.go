package script

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// TestHandedBack: lost leases are not the consumer's to hand back and end
// the hand-back; any other failure is returned to try again.
func TestHandedBack(t *testing.T) {
	down := errors.New("connection reset")
	lost := &broker.DeliveryError{Err: broker.ErrLeaseLost}
	cases := []struct {
		name    string
		err     error
		n       int
		wantErr bool
	}{
		{"all released", nil, 5, false},
		{"two reclaimed meanwhile", multierror.Append(nil, lost, lost), 3, false},
		{"one not known to be released", multierror.Append(nil, lost, &broker.DeliveryError{Err: down}), 3, true},
		{"the call failed", down, 0, true},
	}
	for _, tc := range cases {
		n, err := HandedBack(5, tc.err)
		if n != tc.n || (err != nil) != tc.wantErr {
			t.Errorf("%s: HandedBack(5, %v) = %d, %v; want %d, error %v", tc.name, tc.err, n, err, tc.n, tc.wantErr)
		}
	}
}

// TestDoubtOutlivesTriesThatDidNotRun: a settle whose reply was lost is
// doubted until a later try gets the script's verdict on the lease. Tries
// that did not run in between (Redis down: the dial failed; Redis
// restarting: LOADING; a reply lost again) leave the doubt, so that the
// try after them, finding the lease gone with no takeover, reports the
// first settle as landed. A verdict resolves the doubt once.
func TestDoubtOutlivesTriesThatDidNotRun(t *testing.T) {
	lostReply := errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
	dialFailed := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	var loading redis.Error = replyError("LOADING Redis is loading the dataset in memory")
	lost := fmt.Errorf("stream: ack: %w", broker.ErrLeaseLost)

	var d Doubts
	// Each try as the drivers make it: Note, then Resolve, of its error.
	for _, err := range []error{lostReply, dialFailed, loading, redis.ErrPoolTimeout} {
		d.Note("r1", err)
		if got := d.Resolve("r1", false, err); got != err {
			t.Fatalf("Resolve(%v) = %v, want the error itself", err, got)
		}
	}
	if err := d.Resolve("r1", true, lost); err != nil {
		t.Fatalf("the lease gone with no takeover after a lost reply and tries that did not run: %v, want nil (the first settle landed)", err)
	}
	if err := d.Resolve("r1", true, lost); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("a second settle after the doubt was resolved: %v, want ErrLeaseLost", err)
	}

	// A takeover (not gone) is a verdict too: lease lost, doubt resolved.
	d.Note("r2", lostReply)
	if err := d.Resolve("r2", false, lost); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("a doubted settle of a lease taken over: %v, want ErrLeaseLost", err)
	}
	if err := d.Resolve("r2", true, lost); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("after its doubt was resolved: %v, want ErrLeaseLost", err)
	}

	// Without a doubt the lease is lost.
	if err := d.Resolve("r3", true, lost); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("an undoubted settle of a gone lease: %v, want ErrLeaseLost", err)
	}
}

// replyError is an error reply from Redis, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
