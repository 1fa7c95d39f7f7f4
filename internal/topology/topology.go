// Package topology keeps a Redis Cluster client's map of slots current
// through a failover.
//
// go-redis reloads a ClusterClient's slot map on a MOVED reply or once
// per ClusterStateReloadInterval (a minute by default). When a master
// dies, its slots move to a promoted replica without any node answering
// MOVED to the commands that still go to the dead address: they fail to
// connect, and go-redis's own retries pick the same dead master from the
// same map, so a producer or a pool could wait out the whole interval
// before it found the new master. Watch adds a hook that asks for a reload
// (go-redis runs at most one at a time, 200 ms apart) whenever a command
// fails in a way that says the map may be stale.
package topology

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Watch makes client reload its slot map when a command fails to reach a
// node or a node says the slot moved or the cluster is down; it does
// nothing for clients other than a *redis.ClusterClient. The hook costs a
// type switch per call and nothing more until a call fails. Several
// drivers on one client each add one; the reloads they ask for coalesce.
func Watch(client redis.UniversalClient) {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return
	}
	key := weak.Make(cc)
	if _, loaded := watched.LoadOrStore(key, struct{}{}); loaded {
		return
	}
	runtime.AddCleanup(cc, func(k weak.Pointer[redis.ClusterClient]) { watched.Delete(k) }, key)
	cc.AddHook(hook{cc})
}

// watched holds the clients Watch added its hook to, weakly, so that
// drivers built again and again on one client add one hook in all.
var watched sync.Map // weak.Pointer[redis.ClusterClient] -> struct{}

type hook struct{ cc *redis.ClusterClient }

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && ctx.Err() == nil && Stale(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil || ctx.Err() != nil {
			return err // a caller's deadline says nothing of the node
		}
		stale := Stale(err)
		for _, c := range cmds {
			if stale {
				break
			}
			stale = c.Err() != nil && Stale(c.Err())
		}
		if stale {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// Stale reports whether err says the node a command went to may no longer
// serve its slot: the node could not be reached (refused, or a dial that
// timed out: a host gone silent) or its connection broke or timed out, or
// it answered MOVED, ASK, CLUSTERDOWN, TRYAGAIN, READONLY or LOADING. The
// caller tells its own context's end apart (ctx.Err()): a deadline that
// cut a read short looks like a timeout here.
func Stale(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"MOVED ", "ASK ", "CLUSTERDOWN ", "TRYAGAIN ", "READONLY ", "LOADING "} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return Unreachable(err)
}

// Unreachable reports whether err is the connection's failure rather than
// an answer: it could not be made, broke, or timed out.
func Unreachable(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
