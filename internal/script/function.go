package script

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A script run by EVAL defines its library helpers again on every call:
// each top-level local function is a new closure, about 0.1-0.2 µs apiece
// (Redis 7.0 on a 2-vCPU machine: list's fetch.lua on an empty queue costs
// 23 µs by EVALSHA, 13 µs as a function; 43 helpers). A Redis function
// (Redis 7's FUNCTION LOAD and FCALL) defines them once, when its library
// loads. A script made with AsFunction runs as one for a client that
// EnableFunctions was given: its library holds the helpers it links and
// registers the script's text as the callback of one function, both named
// after the script's SHA, so that every version of Conveyor has its own
// and versions side by side never replace each other's.
//
// Functions are opt-in because a function's name, unlike a script's SHA,
// is not bound to its code: any Redis user allowed FUNCTION LOAD can load
// other code under that name (FUNCTION LOAD REPLACE), and it then runs
// with the permissions of whoever calls it. Enable them only where no
// user you do not trust may load functions.
//
// The library is loaded on first use, on the node that answers: a call
// that finds no such function (the server restarted without persistence,
// was flushed, or never had it) loads it there and calls again; neither
// call had run it. A load that fails (a full Redis refuses FUNCTION LOAD,
// a node is out of reach) leaves the call, and the client's next ones for
// a second, to EVALSHA. A server without functions (before Redis 7, an
// emulator) or a user without the permission to load or call them gets
// the script by EVALSHA, as if AsFunction had not been called; the client
// remembers that for ten minutes before it tries a function again.

// enabled holds the clients that run AsFunction scripts as functions.
var enabled sync.Map

// EnableFunctions makes every script made with AsFunction run as a Redis
// function when sent through c. See above for what that asks of the
// server's ACL users.
func EnableFunctions(c Processor) { enabled.Store(c, true) }

// functionRetry is how long a client that could not use functions runs
// the script by EVALSHA before it tries a function again.
const functionRetry = 10 * time.Minute

// loadRetry is how long a client whose load the server refused (out of
// memory) runs the script by EVALSHA before it loads again.
const loadRetry = time.Second

// function is what AsFunction adds to a script.
type function struct {
	name string // the function's, and its library's, name
	lib  string // the library's code, for FUNCTION LOAD
	// off maps a client that could not use the function to when it may
	// try again.
	off sync.Map
}

// AsFunction makes s run as a Redis function for the clients given to
// EnableFunctions, with the function flags flags (allow-oom: the script runs when Redis is
// out of memory, as a settle must; none: Redis refuses it then, as an
// enqueue must be refused). It returns s. The script must have been made
// with libraries (New with libs), and its text must read its keys and
// arguments from KEYS and ARGV.
func (s *Script) AsFunction(flags ...string) *Script {
	name := "conveyor_" + s.s.Hash()[:16]
	defs := strings.TrimSuffix(s.src, s.body)
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString("local KEYS, ARGV\n")
	b.WriteString(defs)
	b.WriteString("\nredis.register_function{function_name = '" + name + "', flags = {")
	for i, f := range flags {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + f + "'")
	}
	b.WriteString("}, callback = function(keys, args)\nKEYS, ARGV = keys, args\n")
	b.WriteString(s.body)
	b.WriteString("\nend}\n")
	s.fn = &function{name: name, lib: b.String()}
	return s
}

// Function returns the name of the function (and its library) of a script
// made with AsFunction, "" for another.
func (s *Script) Function() string {
	if s.fn == nil {
		return ""
	}
	return s.fn.name
}

// runFunction runs s by FCALL through c. ok is false when c does not use
// functions: the caller then runs s by EVALSHA.
func (s *Script) runFunction(ctx context.Context, c Processor, keys []string, args []any) (v any, err error, ok bool) {
	if _, on := enabled.Load(c); !on {
		return nil, nil, false
	}
	if until, off := s.fn.off.Load(c); off && time.Now().Before(until.(time.Time)) {
		return nil, nil, false
	}
	cmd := s.fcall(ctx, keys, args)
	err = Send(ctx, c, cmd)
	if isFunctionMissing(err) {
		if lerr := s.load(ctx, c, keys); lerr != nil {
			// Out of memory, a node out of reach: this call, and the
			// next for loadRetry, go by EVALSHA. A server or user that
			// has no FUNCTION LOAD, or code it will not compile: for
			// functionRetry.
			wait := loadRetry
			var refused redis.Error
			if noFunctions(lerr) || (errors.As(lerr, &refused) && !strings.HasPrefix(lerr.Error(), "OOM")) {
				wait = functionRetry
			}
			s.fn.off.Store(c, time.Now().Add(wait))
			return nil, nil, false
		}
		cmd = s.fcall(ctx, keys, args)
		err = Send(ctx, c, cmd)
	}
	if noFunctions(err) {
		s.fn.off.Store(c, time.Now().Add(functionRetry))
		return nil, nil, false
	}
	if err != nil {
		return nil, s.wrap(err), true
	}
	return cmd.Val(), nil, true
}

// fcall builds an FCALL of s.
func (s *Script) fcall(ctx context.Context, keys []string, args []any) *redis.Cmd {
	return scriptCmd(ctx, "fcall", s.fn.name, keys, args)
}

// load loads s's library on the server of keys[0] that c sends to: on a
// cluster client, the master of its slot. A library that is there already
// counts as loaded.
func (s *Script) load(ctx context.Context, c Processor, keys []string) error {
	p := c
	if cc, ok := c.(*redis.ClusterClient); ok {
		if len(keys) == 0 {
			return errors.New("conveyor: a function without keys has no node to load on")
		}
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return err
		}
		p = n
	}
	err := p.Process(ctx, redis.NewCmd(ctx, "function", "load", s.fn.lib))
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// isFunctionMissing reports whether err says the server has no such
// function: nothing ran.
func isFunctionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// noFunctions reports whether err says c cannot use functions: the server
// has no FCALL or FUNCTION (before Redis 7, an emulator), or the user may
// not run them. Nothing ran. An error raised inside a function (it names
// the script, "script: ..., on @user_function:N") is the function's own:
// it ran, and must not run again by EVALSHA.
func noFunctions(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.ToLower(rerr.Error())
	if strings.Contains(msg, "script:") || strings.Contains(msg, "user_function") {
		return false
	}
	if !strings.HasPrefix(msg, "noperm") && !strings.Contains(msg, "unknown command") && !strings.Contains(msg, "unknown subcommand") {
		return false
	}
	for _, name := range []string{"'fcall'", "`fcall`", "'function|load'", "'function'", "`function`", "function help"} {
		if strings.Contains(msg, name) {
			return true
		}
	}
	return false
}
