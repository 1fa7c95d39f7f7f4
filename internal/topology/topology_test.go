package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyErr is an error reply from Redis as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")

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
		{context.Canceled, false},
		{fmt.Errorf("fetch: %w", context.DeadlineExceeded), false},
		{errors.New("conveyor: invalid message"), false},
	} {
		if got := Stale(c.err); got != c.want {
			t.Errorf("Stale(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
