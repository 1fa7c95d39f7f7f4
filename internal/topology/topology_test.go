package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"weak"

	"github.com/redis/go-redis/v9"
)

// replyErr is an error reply from Redis as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")

// timeoutErr is a dial's timeout as net returns it: it is also
// context.DeadlineExceeded.
type timeoutErr struct{}

func (timeoutErr) Error() string        { return "i/o timeout" }
func (timeoutErr) Timeout() bool        { return true }
func (timeoutErr) Temporary() bool      { return true }
func (timeoutErr) Is(target error) bool { return target == context.DeadlineExceeded }

// TestWatchOnce: drivers built again and again on one client add one hook.
func TestWatchOnce(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	Watch(cc)
	Watch(cc)
	n := 0
	watched.Range(func(k, _ any) bool {
		if k.(weak.Pointer[redis.ClusterClient]).Value() == cc {
			n++
		}
		return true
	})
	if n != 1 {
		t.Fatalf("client watched %d times, want 1", n)
	}
}

func TestStale(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("list: enqueue: %w", refused), true},
		{io.EOF, true},
		{syscall.ECONNRESET, true},
		{replyErr("MOVED 3999 127.0.0.1:7002"), true},
		{replyErr("CLUSTERDOWN The cluster is down"), true},
		{replyErr("READONLY You can't write against a read only replica."), true},
		{replyErr("LOADING Redis is loading the dataset in memory"), true},
		{replyErr("CONVEYOR LEASE_LOST"), false},
		{replyErr("OOM command not allowed"), false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, true}, // a host gone silent
		{context.Canceled, false},
		{errors.New("conveyor: invalid message"), false},
	} {
		if got := Stale(c.err); got != c.want {
			t.Errorf("Stale(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
