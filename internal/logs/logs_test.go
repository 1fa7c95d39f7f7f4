package logs_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/logs"
)

func TestWarnPassesWarningsAndAbove(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	log := logs.Warn(base).With("queue", "orders").WithGroup("job")
	log.Debug("debug record")
	log.Info("info record")
	log.Warn("warn record", "id", "j1")
	log.Error("error record")
	out := buf.String()
	for _, absent := range []string{"debug record", "info record"} {
		if strings.Contains(out, absent) {
			t.Errorf("%q passed: %s", absent, out)
		}
	}
	for _, present := range []string{"warn record", "error record", "queue=orders", "job.id=j1"} {
		if !strings.Contains(out, present) {
			t.Errorf("%q missing: %s", present, out)
		}
	}
}

func TestWarnKeepsTheHandlersOwnLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := logs.Warn(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	log.Warn("warn record")
	log.Error("error record")
	if out := buf.String(); strings.Contains(out, "warn record") || !strings.Contains(out, "error record") {
		t.Fatalf("a handler set to Error got: %s", out)
	}
}
