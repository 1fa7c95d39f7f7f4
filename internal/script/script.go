// Package script runs Conveyor's embedded Lua scripts and maps the status
// codes they reply with to the sentinel errors of package broker, from one
// table.
//
// Every script is fixed text in a lua/*.lua file beside the Go that runs it;
// data only travels in KEYS and ARGV. A script signals a refusal with an
// error reply "CONVEYOR <CODE> <detail>" or, in a batch, with a per-item
// status string; Err and Status map both.
package script

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// Script is one embedded Lua script.
type Script struct {
	name string
	src  string
	s    *redis.Script
}

// New wraps src, preceded by the definitions of libs it uses (see link);
// name appears in errors.
func New(name, src string, libs ...string) *Script {
	if len(libs) > 0 {
		body := src
		src = link(src, libs...)
		register(name, body, libs, src)
	}
	return &Script{name: name, src: src, s: redis.NewScript(src)}
}

// LinkedScript is one script New built with libraries, for tests: Full is
// the libraries and the body unlinked (libs joined by newlines, then the
// body: what link returns when it keeps every definition), Linked the text
// the script runs.
type LinkedScript struct {
	Name   string
	Full   string
	Linked string
}

// built records what New linked: the strings it was given, shared, not
// copies, so that keeping them costs next to nothing.
type built struct {
	name, body, text string
	libs             []string
}

var (
	linkedMu sync.Mutex
	linked   []built
)

func register(name, body string, libs []string, text string) {
	linkedMu.Lock()
	linked = append(linked, built{name: name, body: body, text: text, libs: libs})
	linkedMu.Unlock()
}

// Linked returns, for tests, every script New has built with libraries so
// far, in the order they were built.
func Linked() []LinkedScript {
	linkedMu.Lock()
	defer linkedMu.Unlock()
	out := make([]LinkedScript, len(linked))
	for i, b := range linked {
		out[i] = LinkedScript{Name: b.name, Full: strings.Join(b.libs, "\n") + b.body, Linked: b.text}
	}
	return out
}

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

// Run runs the script (EVALSHA, falling back to EVAL on NOSCRIPT) and maps a
// Conveyor error reply to its sentinel. The call is sent once (see Once):
// a reply lost to a broken connection is an error, never a second run.
func (s *Script) Run(ctx context.Context, c Processor, keys []string, args ...any) (any, error) {
	cmd := s.cmd(ctx, true, keys, args)
	err := Send(ctx, c, cmd)
	if IsNoScript(err) {
		cmd = s.cmd(ctx, false, keys, args)
		err = Send(ctx, c, cmd)
	}
	if err != nil {
		return nil, s.wrap(err)
	}
	return cmd.Val(), nil
}

// cmd builds an EVALSHA (sha) or EVAL of the script.
func (s *Script) cmd(ctx context.Context, sha bool, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		a = append(a, "evalsha", s.s.Hash())
	} else {
		a = append(a, "eval", s.src)
	}
	a = append(a, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // a cluster client routes by KEYS[1]
	}
	return cmd
}

// EvalSha queues the script on a pipeline by SHA, to be sent once (see
// Once); pair it with Load so the server has it (see Preload).
func (s *Script) EvalSha(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	cmd := s.cmd(ctx, true, keys, args)
	_ = p.Process(ctx, Once(cmd))
	return cmd
}

// Eval queues the full script text on a pipeline, to be sent once.
func (s *Script) Eval(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	cmd := s.cmd(ctx, false, keys, args)
	_ = p.Process(ctx, Once(cmd))
	return cmd
}

// Client is what a script's calls are sent through: a go-redis client, or
// one connection of one (a *redis.Conn).
type Client interface {
	Processor
	Pipeline() redis.Pipeliner
}

// Processor sends commands: a client, or a pipeline that queues them.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// once is a command go-redis must not send again.
type once struct{ redis.Cmder }

// NoRetry tells go-redis not to re-send the command after a connection
// error.
func (once) NoRetry() bool { return true }

// Once marks cmd to be sent at most once. go-redis re-sends a command whose
// connection failed (MaxRetries, 3 by default), also when the command had
// reached Redis and only its reply was lost: a script that stores, leases
// or settles would then act twice, and its second reply would describe the
// second run (a duplicate job, a refused "duplicate" of the caller's own
// job, a lost lease for a job that was acked). A pipeline holding such a
// command is not re-sent either. Send retries on its own only when the
// command cannot have been sent.
func Once(cmd redis.Cmder) redis.Cmder { return once{cmd} }

// Send sends cmd once through c (see Once), trying again, a few times,
// only while the failure proves nothing was sent: the connection could not
// be made, or the client's pool had none free in time.
func Send(ctx context.Context, c Processor, cmd redis.Cmder) error {
	backoff := 8 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := c.Process(ctx, once{cmd})
		if err == nil || attempt == 2 || !neverSent(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 8
		cmd.SetErr(nil)
	}
}

// neverSent reports whether err proves that the command never left this
// process.
func neverSent(err error) bool {
	var op *net.OpError
	return (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, redis.ErrPoolTimeout)
}

// Unsure reports whether err leaves a command's outcome unknown: anything
// but an error reply from Redis (which ran or refused the command) could
// have come after the command reached Redis, a reply lost to a broken
// connection or a deadline.
func Unsure(err error) bool {
	if err == nil || neverSent(err) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply) && !errors.Is(err, broker.ErrLeaseLost) && !errors.Is(err, broker.ErrQueueFull)
}

// RanInPart reports whether err is a script's failure while it ran (a
// command it called failed, or its Lua did): Redis keeps the writes the
// script made before that, so a script that leases or reads may have done
// so without its caller learning what. An error the script returned on
// purpose (redis.error_reply), or a refusal before it started (OOM,
// NOSCRIPT, an ACL refusal of the script call), is not one.
func RanInPart(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(err.Error(), "user_script")
}

// Result maps the error of a pipelined run of the script.
func (s *Script) Result(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, s.wrap(err)
	}
	return v, nil
}

func (s *Script) wrap(err error) error {
	if mapped := Err(err); mapped != err {
		return mapped
	}
	return fmt.Errorf("conveyor: script %s: %w", s.name, err)
}

// IsNoScript reports whether err says the server does not have the script.
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

var codes = map[string]error{
	"LEASE_LOST":  broker.ErrLeaseLost,
	"QUEUE_FULL":  broker.ErrQueueFull,
	"UNSUPPORTED": broker.ErrUnsupported,
	"CANCELED":    broker.ErrJobCanceled,
}

// Status maps a per-item status string from a batch reply: "OK" is nil.
func Status(code string) error {
	if code == "OK" {
		return nil
	}
	if e, ok := codes[code]; ok {
		return e
	}
	return fmt.Errorf("conveyor: unexpected script status %q", code)
}

// Err maps an error reply "CONVEYOR <CODE> <detail>" to its sentinel,
// wrapped with the detail; other errors come back unchanged.
func Err(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	msg := rerr.Error()
	rest, ok := strings.CutPrefix(msg, "CONVEYOR ")
	if !ok {
		return err
	}
	code, detail, _ := strings.Cut(rest, " ")
	sentinel, ok := codes[code]
	if !ok {
		return err
	}
	if detail == "" {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, detail)
}

// Call is one run of a script in RunPipelined: its keys and arguments, and,
// after the run, its reply or error.
type Call struct {
	Keys []string
	Args []any
	Val  any
	Err  error
	cmd  *redis.Cmd
}

// RunPipelined runs the script once per call, all in one round trip, by
// SHA; calls the server had no script for (NOSCRIPT: a restart, SCRIPT FLUSH)
// are sent once more with the script's text. Each call gets its own reply
// or error (mapped as Run maps them). Each of also queues commands of its
// own on the same round trip (a driver registering the queues it writes
// to); they are sent once and read by whoever queued them.
func (s *Script) RunPipelined(ctx context.Context, c Client, calls []*Call, also ...func(redis.Pipeliner)) {
	pipe := c.Pipeline()
	for _, call := range calls {
		call.cmd = s.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	for _, f := range also {
		f(pipe)
	}
	_ = Exec(ctx, pipe) // errors are read per call below
	var missing []*Call
	for _, call := range calls {
		if IsNoScript(call.cmd.Err()) {
			missing = append(missing, call)
		}
	}
	if len(missing) > 0 {
		pipe := c.Pipeline()
		for _, call := range missing {
			call.cmd = s.Eval(ctx, pipe, call.Keys, call.Args...)
		}
		_ = Exec(ctx, pipe)
	}
	for _, call := range calls {
		call.Val, call.Err = s.Result(call.cmd)
	}
}

// Exec sends the commands queued on p and returns the first error, as
// p.Exec does. When the connection could not be set up (an AUTH, HELLO or
// SELECT refused during the handshake: a wrong password, an unknown ACL
// user, a database out of range), go-redis returns that error from Exec
// but leaves each command's own error nil, so a command read alone would
// look like a success. Exec gives the error to every command then, so that
// reading each command's Err is always safe.
func Exec(ctx context.Context, p redis.Pipeliner) error {
	cmds, err := p.Exec(ctx)
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return err // the server answered: each command has its own outcome
		}
	}
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}
