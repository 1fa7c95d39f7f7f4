package redistest

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
)

// Outage is a go-redis Dialer (redis.Options.Dialer) that fails, as
// dialing a Redis that is down does, while it is down. Connections made
// before stay: break them first (a Proxy's lost reply or Cut does).
type Outage struct {
	down   atomic.Bool
	dialer net.Dialer
}

// Set puts the outage on (down) or ends it.
func (o *Outage) Set(down bool) { o.down.Store(down) }

// Dial dials addr, or fails with a dial error while the outage is on.
func (o *Outage) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if o.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (redistest: outage)")}
	}
	return o.dialer.DialContext(ctx, network, addr)
}

// UntilConnected runs try until its error is no dial error and returns
// that error: go-redis fails calls with the last dial's error until its
// own background dial succeeds (about a second after an outage ended).
func UntilConnected(t testing.TB, try func() error) error {
	t.Helper()
	var err error
	Eventually(t, "the client to connect again", func() bool {
		err = try()
		var op *net.OpError
		return !errors.As(err, &op) || op.Op != "dial"
	})
	return err
}
