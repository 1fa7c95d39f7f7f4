package conveyor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestHeadersCountAgainstTheCap: MaxPayloadBytes caps the payload and the
// headers together (names and values), so 10 MiB of headers do not pass
// under the default 1 MiB cap; a job has at most MaxHeaders headers, each
// name at most MaxHeaderNameLen bytes. Each refusal is ErrInvalidMessage,
// names the request's index in an EnqueueMany, does not echo the outsized
// header back, and stores nothing; a job exactly at each limit is stored.
func TestHeadersCountAgainstTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	def, _, defPrefix, defRdb := newClient(t, nil)
	huge := strings.Repeat("h", 10<<20)
	_, err := def.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Headers: map[string]string{"trace": huge}})
	var tooLarge *conveyor.PayloadTooLargeError
	if !errors.Is(err, conveyor.ErrInvalidMessage) || !errors.Is(err, conveyor.ErrPayloadTooLarge) || !errors.As(err, &tooLarge) {
		t.Fatalf("10 MiB of headers under the default 1 MiB cap: %v, want a *PayloadTooLargeError that is ErrInvalidMessage", err)
	}
	if tooLarge.Size != 5+10<<20 || tooLarge.Headers != 5+10<<20 || tooLarge.Limit != conveyor.DefaultMaxPayloadBytes {
		t.Fatalf("10 MiB of headers: %+v, want Size and Headers %d, Limit %d", *tooLarge, 5+10<<20, conveyor.DefaultMaxPayloadBytes)
	}
	if ks := redistest.Keys(t, defRdb, defPrefix); len(ks) != 0 {
		t.Fatalf("a job over the cap stored keys: %v", ks)
	}

	c, _, prefix, rdb := newClient(t, &conveyor.ClientConfig{MaxPayloadBytes: 100})
	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("h%02d", i)] = ""
		}
		return h
	}
	longName := strings.Repeat("n", conveyor.MaxHeaderNameLen+1)
	bad := []struct {
		name string
		args any
		h    map[string]string
		text string
	}{
		{"payload and headers over the cap", []byte(strings.Repeat("p", 60)), map[string]string{"a": strings.Repeat("v", 40)},
			"conveyor: payload and headers of k are 101 bytes (headers 41), over the 100 byte cap"},
		{"headers alone over the cap", nil, map[string]string{"a": strings.Repeat("v", 100)},
			"conveyor: payload and headers of k are 101 bytes (headers 101), over the 100 byte cap"},
		{"too many headers", nil, headers(conveyor.DefaultMaxHeaders + 1),
			"conveyor: invalid message: Headers: 65, more than 64"},
		{"long header name", nil, map[string]string{longName: ""},
			"conveyor: invalid message: Headers: a name of 129 bytes, longer than 128"},
	}
	for _, tc := range bad {
		_, err := c.Enqueue(ctx, "k", tc.args, &conveyor.EnqueueOptions{Headers: tc.h})
		if !errors.Is(err, conveyor.ErrInvalidMessage) || err.Error() != tc.text {
			t.Errorf("Enqueue, %s: %v, want ErrInvalidMessage %q", tc.name, err, tc.text)
		}
		reqs := make([]conveyor.Request, 500)
		for i := range reqs {
			reqs[i] = conveyor.Request{Kind: "k"}
		}
		reqs[417] = conveyor.Request{Kind: "k", Args: tc.args, Opts: &conveyor.EnqueueOptions{Headers: tc.h}}
		msgs, err := c.EnqueueMany(ctx, reqs...)
		var re *conveyor.RequestError
		if msgs != nil || !errors.Is(err, conveyor.ErrInvalidMessage) || !errors.As(err, &re) || re.Index != 417 || err.Error() != "job 417: "+tc.text {
			t.Errorf("EnqueueMany, %s at 417: %d messages, %v; want none and job 417: %q", tc.name, len(msgs), err, tc.text)
		}
	}
	if ks := redistest.Keys(t, rdb, prefix); len(ks) != 0 {
		t.Fatalf("refused jobs stored keys: %v", ks)
	}

	// At each limit the job is stored; Conveyor's own headers (a delay's
	// due time) count toward neither limit.
	many := headers(conveyor.DefaultMaxHeaders)
	for _, tc := range []struct {
		name string
		c    *conveyor.Client
		args any
		o    *conveyor.EnqueueOptions
	}{
		{"payload and headers at the cap, delayed", c, []byte(strings.Repeat("p", 59)), &conveyor.EnqueueOptions{Headers: map[string]string{"a": strings.Repeat("v", 40)}, Delay: time.Hour}},
		{"64 headers, delayed", def, nil, &conveyor.EnqueueOptions{Headers: many, Delay: time.Hour}},
		{"a 128-byte name", def, nil, &conveyor.EnqueueOptions{Headers: map[string]string{longName[1:]: ""}}},
	} {
		if _, err := tc.c.Enqueue(ctx, "k", tc.args, tc.o); err != nil {
			t.Errorf("%s: %v, want it stored", tc.name, err)
		}
	}
	// MaxHeaders is the client's to set.
	few, _, _, _ := newClient(t, &conveyor.ClientConfig{MaxHeaders: 2})
	if _, err := few.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Headers: headers(3)}); !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Fatalf("3 headers with MaxHeaders 2: %v, want ErrInvalidMessage", err)
	}
	if _, err := conveyor.NewClient(nil, &conveyor.ClientConfig{MaxHeaders: -1}); err == nil {
		t.Fatal("NewClient took a negative MaxHeaders")
	}
}

// TestDuplicateNamesOnlyTheCallersID: a job refused for its unique key is
// named by its ID only when the caller chose that ID; an ID the client
// generated never shows, the caller never saw it.
func TestDuplicateNamesOnlyTheCallersID(t *testing.T) {
	t.Parallel()
	c, o := uniqueKeyHeld(t)
	ctx := context.Background()
	check := func(what string, err error, want string) {
		t.Helper()
		var de *broker.DuplicateError
		if !errors.Is(err, conveyor.ErrDuplicate) || !errors.As(err, &de) || de.Key != "order:1" || de.Message == nil {
			t.Fatalf("%s: %v, want a *broker.DuplicateError for order:1 with its message", what, err)
		}
		if err.Error() != want {
			t.Errorf("%s: %q, want %q", what, err, want)
		}
		if id := ulidLike.FindString(err.Error()); id != "" {
			t.Errorf("%s: %q names the generated ID %s", what, err, id)
		}
	}
	const generated = `conveyor: message refused: queue "default" has a message holding unique key "order:1"`
	_, err := c.Enqueue(ctx, "k", nil, o)
	check("Enqueue", err, generated)
	_, err = c.EnqueueMany(ctx, conveyor.Request{Kind: "k"}, conveyor.Request{Kind: "k", Opts: o})
	check("EnqueueMany", err, generated)
	_, err = c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: "charge-2", UniqueKey: "order:1"})
	check("Enqueue with the caller's ID", err,
		`conveyor: message "charge-2" refused: queue "default" has a message holding unique key "order:1"`)
}
