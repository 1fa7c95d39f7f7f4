package worker

import (
	"context"
	"log/slog"
	"testing"
)

// A pool given no Logger logs its warnings and errors (failed and
// discarded jobs, lost leases, Redis errors) through slog.Default(), and
// leaves its Debug and Info records out.
func TestDefaultLoggerWarns(t *testing.T) {
	t.Parallel()
	c, err := Config{Queue: "q"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !c.Logger.Enabled(ctx, slog.LevelWarn) || !c.Logger.Enabled(ctx, slog.LevelError) {
		t.Fatal("the default logger drops warnings or errors")
	}
	if c.Logger.Enabled(ctx, slog.LevelInfo) {
		t.Fatal("the default logger passes Info records")
	}
}
