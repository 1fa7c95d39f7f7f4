// Package logs holds the logger Conveyor's components use when their
// configuration names none: the records at warning level and above go to
// slog.Default(), so that failures, discards and lost connections surface
// the way net/http's server errors do, and the chattier records stay out.
package logs

import (
	"context"
	"log/slog"
)

// Default returns a logger that passes records at slog.LevelWarn and above
// to the handler of slog.Default() as it is when Default is called.
func Default() *slog.Logger {
	return Warn(slog.Default().Handler())
}

// Warn returns a logger that passes records at slog.LevelWarn and above to
// h and drops the others.
func Warn(h slog.Handler) *slog.Logger {
	return slog.New(atLeast{min: slog.LevelWarn, h: h})
}

// atLeast passes records at min and above to h.
type atLeast struct {
	min slog.Level
	h   slog.Handler
}

func (a atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= a.min && a.h.Enabled(ctx, l)
}

func (a atLeast) Handle(ctx context.Context, r slog.Record) error {
	return a.h.Handle(ctx, r)
}

func (a atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{min: a.min, h: a.h.WithAttrs(attrs)}
}

func (a atLeast) WithGroup(name string) slog.Handler {
	return atLeast{min: a.min, h: a.h.WithGroup(name)}
}
