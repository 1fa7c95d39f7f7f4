package script

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-multierror"

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
