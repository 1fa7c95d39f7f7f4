package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/middleware"
)

var errBoom = errors.New("boom")

//go:noinline
func panickingHandler(v any) {
	panic(v)
}

// TestRecover: a panic below Recover comes back as a *PanicError whose
// Value is the panic value and whose Stack shows the frame that panicked;
// a panic(err) keeps err visible to errors.Is; plain returns pass through.
func TestRecover(t *testing.T) {
	t.Parallel()
	run := func(h conveyor.HandlerFunc) error {
		return middleware.Recover()(h).ProcessJob(context.Background(), newJob(&fakeSettler{}, "1", "k", nil))
	}

	err := run(func(context.Context, *conveyor.Job) error { panickingHandler("kaput"); return nil })
	var pe *middleware.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *PanicError", err, err)
	}
	if pe.Value != "kaput" {
		t.Fatalf("Value = %v, want kaput", pe.Value)
	}
	if !strings.Contains(string(pe.Stack), "panickingHandler") {
		t.Fatalf("stack does not show the panicking frame:\n%s", pe.Stack)
	}
	if !strings.Contains(err.Error(), "kaput") || !strings.Contains(err.Error(), "panickingHandler") {
		t.Fatalf("Error() lacks the value or the stack: %q", err.Error())
	}

	err = run(func(context.Context, *conveyor.Job) error { panickingHandler(errBoom); return nil })
	if !errors.Is(err, errBoom) || !errors.As(err, &pe) {
		t.Fatalf("panic(errBoom) gave %v, want a *PanicError wrapping errBoom", err)
	}

	if err := run(func(context.Context, *conveyor.Job) error { return errBoom }); err != errBoom {
		t.Fatalf("a returned error came back as %v", err)
	}
	if err := run(func(context.Context, *conveyor.Job) error { return nil }); err != nil {
		t.Fatalf("nil came back as %v", err)
	}
}
