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
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// Script is one embedded Lua script.
type Script struct {
	name string
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
	return &Script{name: name, s: redis.NewScript(src)}
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
// Conveyor error reply to its sentinel.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) (any, error) {
	v, err := s.s.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return nil, s.wrap(err)
	}
	return v, nil
}

// EvalSha queues the script on a pipeline by SHA; pair it with Load so the
// server has it (see Preload).
func (s *Script) EvalSha(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.s.EvalSha(ctx, p, keys, args...)
}

// Eval queues the full script text on a pipeline.
func (s *Script) Eval(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.s.Eval(ctx, p, keys, args...)
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
func (s *Script) RunPipelined(ctx context.Context, c redis.UniversalClient, calls []*Call, also ...func(redis.Pipeliner)) {
	pipe := c.Pipeline()
	for _, call := range calls {
		call.cmd = s.s.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	for _, f := range also {
		f(pipe)
	}
	_, _ = pipe.Exec(ctx) // errors are read per call below
	var missing []*Call
	for _, call := range calls {
		if IsNoScript(call.cmd.Err()) {
			missing = append(missing, call)
		}
	}
	if len(missing) > 0 {
		pipe := c.Pipeline()
		for _, call := range missing {
			call.cmd = s.s.Eval(ctx, pipe, call.Keys, call.Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, call := range calls {
		call.Val, call.Err = s.Result(call.cmd)
	}
}
