package redischeck

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/script"
)

// ProbeQueue is the queue name Check's commands name: empty, so no queue
// has its keys or channels (a queue name may not be empty), and an ACL key
// or channel pattern that covers every queue under a prefix covers it.
const ProbeQueue = ""

// Need is one command a driver sends, with arguments shaped as it sends
// them: a key or channel of the probe queue (or the driver's own key)
// where it takes one. Obj is the key or channel an error names when the
// ACL allows the command but not on them.
type Need struct {
	Cmd     string // "ZADD", or a command and its subcommand: "XGROUP CREATE"
	Args    []string
	Obj     string
	Channel bool // Obj is a channel, not a key
}

// Command is a need whose arguments name no key or channel.
func Command(cmd string, args ...string) Need { return Need{Cmd: cmd, Args: args} }

// Key is a need on key; args are all of the command's arguments, key among
// them where the command takes it.
func Key(key, cmd string, args ...string) Need { return Need{Cmd: cmd, Args: args, Obj: key} }

// Channel is a need on channel ch, its only argument but for rest.
func Channel(ch, cmd string, rest ...string) Need {
	return Need{Cmd: cmd, Args: append([]string{ch}, rest...), Obj: ch, Channel: true}
}

//go:embed lua/acl.lua
var aclLua string

var aclScript = script.New("redischeck.acl", aclLua)

// Permissions asks the server, in one script call that reads and writes
// nothing, whether the connection's ACL user may send every command of
// needs, and returns an error naming each one it may not (see Missing.Err).
// A server without redis.acl_check_cmd (older than 7.0, or an embedded test
// server) is not asked: that is logged at debug level.
func Permissions(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, name string, needs []Need) error {
	args := make([]any, 0, 5*len(needs))
	for _, n := range needs {
		words := strings.Fields(n.Cmd)
		args = append(args, len(words)+len(n.Args))
		for _, w := range words {
			args = append(args, w)
		}
		for _, a := range n.Args {
			args = append(args, a)
		}
	}
	var m Missing
	v, err := aclScript.Run(ctx, rdb, nil, args...)
	if err != nil {
		if m.Refused(err, "EVALSHA", "") {
			return m.Err(ctx, rdb, name)
		}
		return fmt.Errorf("%s: check: ACL: %w", name, err)
	}
	codes, ok := v.([]any)
	if !ok {
		log.DebugContext(ctx, name+": cannot check the ACL user's permissions", "reply", v)
		return nil
	}
	allowed := make(map[string]bool) // keys and channels some command may use
	for i, c := range codes {
		if i < len(needs) && c == int64(0) {
			allowed[needs[i].Obj] = true
		}
	}
	for i, c := range codes {
		if i >= len(needs) {
			break
		}
		n := needs[i]
		switch c {
		case int64(1):
			m.Command(n.Cmd)
		case int64(2):
			m.Object(n)
		case int64(3):
			// The reason is Redis's secret: when another command may use
			// n's key or channel, the command is what is refused.
			if n.Obj == "" || allowed[n.Obj] {
				m.Command(n.Cmd)
			} else {
				m.Object(n)
			}
		case int64(4):
			m.unknown = append(m.unknown, n.Cmd)
		}
	}
	return m.Err(ctx, rdb, name)
}

// Missing is what an ACL refuses a driver.
type Missing struct {
	commands, keys, channels, unknown []string
}

// Command records that cmd is refused.
func (m *Missing) Command(cmd string) {
	if !slices.Contains(m.commands, cmd) {
		m.commands = append(m.commands, cmd)
	}
}

// Object records that n's command is allowed, but not on n's key or
// channel.
func (m *Missing) Object(n Need) {
	if n.Channel {
		m.channels = append(m.channels, n.Cmd+" to channel "+n.Obj)
	} else if !slices.Contains(m.keys, n.Obj) {
		m.keys = append(m.keys, n.Obj)
	}
}

// Refused records the refusal err reports, if it is one (a NOPERM reply),
// of cmd sent on channel ch ("" for none), and reports whether it was. The
// command the reply names, if any, is recorded rather than cmd (EVAL for a
// script call that fell back from EVALSHA).
func (m *Missing) Refused(err error, cmd, ch string) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "NOPERM") {
		return false
	}
	// Redis 7.0 says "... no permissions to run the 'evalsha' command" or
	// "... to access one of the channels used as arguments"; 7.2 names the
	// channel ("... to access the 'x' channel").
	msg := rerr.Error()
	if _, rest, ok := strings.Cut(msg, "run the '"); ok {
		if named, _, ok := strings.Cut(rest, "'"); ok {
			cmd = strings.ToUpper(strings.ReplaceAll(named, "|", " "))
		}
	}
	if ch != "" && strings.Contains(msg, "channel") {
		m.Object(Need{Cmd: cmd, Obj: ch, Channel: true})
	} else {
		m.Command(cmd)
	}
	return true
}

// Err returns nil when nothing is missing, else one error naming the ACL
// user and everything missing:
//
//	list: check: ACL user "app" may not run EVALSHA, TIME; may not access
//	keys conveyor:{}:ready; may not PUBLISH to channel conveyor:{}:wake
func (m *Missing) Err(ctx context.Context, rdb redis.UniversalClient, name string) error {
	var parts []string
	if len(m.commands) > 0 {
		parts = append(parts, "may not run "+strings.Join(m.commands, ", "))
	}
	switch n := len(m.keys); {
	case n > 3:
		parts = append(parts, fmt.Sprintf("may not access keys %s and %d more", strings.Join(m.keys[:3], ", "), n-3))
	case n > 0:
		parts = append(parts, "may not access keys "+strings.Join(m.keys, ", "))
	}
	for _, c := range m.channels {
		parts = append(parts, "may not "+c)
	}
	if len(parts) == 0 && len(m.unknown) == 0 {
		return nil
	}
	var sentences []string
	if len(parts) > 0 {
		sentences = append(sentences, userName(ctx, rdb)+" "+strings.Join(parts, "; "))
	}
	if len(m.unknown) > 0 {
		sentences = append(sentences, "the server does not know "+strings.Join(m.unknown, ", "))
	}
	return fmt.Errorf("%s: check: %s (docs/redis-keys.md, section ACL, lists what a driver needs)", name, strings.Join(sentences, "; "))
}

// userName names the connection's ACL user: ACL WHOAMI when the user may
// run it, else the user the client logs in as ("default" when it names
// none).
func userName(ctx context.Context, rdb redis.UniversalClient) string {
	if u, err := rdb.Do(ctx, "ACL", "WHOAMI").Text(); err == nil {
		return fmt.Sprintf("ACL user %q", u)
	}
	var u string
	switch c := rdb.(type) {
	case *redis.Client:
		u = c.Options().Username
	case *redis.ClusterClient:
		u = c.Options().Username
	default:
		return "the ACL user"
	}
	if u == "" {
		u = "default"
	}
	return fmt.Sprintf("ACL user %q", u)
}
