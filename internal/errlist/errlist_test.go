package errlist_test

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/internal/errlist"
)

func TestSplit(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	for _, c := range []struct {
		name string
		err  error
		want []error
	}{
		{"plain", a, []error{a}},
		{"errors.Join", errors.Join(a, b), []error{a, b}},
		{"go-multierror", multierror.Append(nil, a, b), []error{a, b}},
	} {
		got := errlist.Split(c.err)
		if len(got) != len(c.want) {
			t.Fatalf("%s: Split = %v, want %v", c.name, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: Split[%d] = %v, want %v", c.name, i, got[i], c.want[i])
			}
		}
	}
}
