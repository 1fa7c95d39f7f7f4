package conveyor_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// ulidLike matches an ID the client generates (internal/ulid).
var ulidLike = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)

// TestEnqueueManyNamesTheRequest: an invalid request in a batch is named by
// its index in the call, not by an ID the client generated for it (the
// caller never saw that ID), and nothing of the batch is stored.
func TestEnqueueManyNamesTheRequest(t *testing.T) {
	t.Parallel()
	c, _, prefix, rdb := newClient(t, &conveyor.ClientConfig{MaxPayloadBytes: 100})
	ctx := context.Background()
	reqs := make([]conveyor.Request, 1000)
	for i := range reqs {
		reqs[i] = conveyor.Request{Kind: "k"}
	}
	for _, tc := range []struct {
		name string
		bad  conveyor.Request
		is   error
		text string
	}{
		{"brace in kind", conveyor.Request{Kind: "a{b"}, conveyor.ErrInvalidMessage, "job 417: conveyor: invalid message: Kind: contains a brace"},
		{"negative delay", conveyor.Request{Kind: "k", Opts: &conveyor.EnqueueOptions{Delay: -time.Second}}, conveyor.ErrInvalidMessage, "job 417: conveyor: invalid message: Delay: negative"},
		{"payload too large", conveyor.Request{Kind: "k", Args: strings.Repeat("x", 200)}, conveyor.ErrPayloadTooLarge, "job 417: conveyor: payload of k is 202 bytes"},
		{"caller's ID", conveyor.Request{Kind: "k", Opts: &conveyor.EnqueueOptions{ID: "order:{1}"}}, conveyor.ErrInvalidMessage, `job 417: conveyor: invalid message "order:{1}": ID: contains a brace`},
	} {
		batch := append([]conveyor.Request(nil), reqs...)
		batch[417] = tc.bad
		msgs, err := c.EnqueueMany(ctx, batch...)
		if msgs != nil || !errors.Is(err, tc.is) {
			t.Fatalf("%s: EnqueueMany = %d messages, %v; want none and %v", tc.name, len(msgs), err, tc.is)
		}
		if !strings.HasPrefix(err.Error(), tc.text) {
			t.Errorf("%s: error %q, want it to start with %q", tc.name, err, tc.text)
		}
		if id := ulidLike.FindString(err.Error()); id != "" {
			t.Errorf("%s: error %q names the generated ID %s", tc.name, err, id)
		}
		var re *conveyor.RequestError
		if !errors.As(err, &re) || re.Index != 417 {
			t.Errorf("%s: error %v is not a *RequestError of index 417", tc.name, err)
		}
	}
	if ks := redistest.Keys(t, rdb, prefix); len(ks) != 0 {
		t.Fatalf("a batch with an invalid request stored keys: %v", ks)
	}

	// Enqueue has no index to name: its error is the request's own.
	_, err := c.Enqueue(ctx, "a{b", nil, nil)
	var me *broker.MessageError
	if !errors.As(err, &me) || err.Error() != "conveyor: invalid message: Kind: contains a brace" {
		t.Fatalf("Enqueue of an invalid kind: %v, want the *broker.MessageError alone, naming no ID", err)
	}
}

// TestEnqueueSingleErrorIsItself: an Enqueue the driver refuses returns the
// one error itself, not a list of one ("1 error occurred: ..."); so does an
// EnqueueMany with one refusal.
func TestEnqueueSingleErrorIsItself(t *testing.T) {
	t.Parallel()
	c, o := uniqueKeyHeld(t)
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		var de *broker.DuplicateError
		var me *multierror.Error
		if !errors.As(err, &de) || !errors.Is(err, conveyor.ErrDuplicate) {
			t.Fatalf("%s: %v, want a *broker.DuplicateError", what, err)
		}
		if errors.As(err, &me) || strings.Contains(err.Error(), "error occurred") {
			t.Fatalf("%s: %q is a list of one error, want the error itself", what, err)
		}
	}
	_, err := c.Enqueue(ctx, "k", nil, o)
	check("Enqueue of a duplicate", err)
	_, err = c.EnqueueMany(ctx, conveyor.Request{Kind: "k", Opts: o})
	check("EnqueueMany of a duplicate", err)
}

// uniqueKeyHeld returns a client whose default queue holds a job with the
// unique key "order:1", and options that ask for that key again.
func uniqueKeyHeld(t *testing.T) (*conveyor.Client, *conveyor.EnqueueOptions) {
	t.Helper()
	c, _, _, _ := newClient(t, nil)
	o := &conveyor.EnqueueOptions{UniqueKey: "order:1", UniqueFor: time.Minute}
	if _, err := c.Enqueue(context.Background(), "k", nil, o); err != nil {
		t.Fatal(err)
	}
	return c, o
}
