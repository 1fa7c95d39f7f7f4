package pubsub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// aclDriver returns a driver logged in as a new ACL user with rules, on a
// prefix of its own (sharded pub/sub when sharded).
func aclDriver(t *testing.T, sharded bool, rules func(prefix string) []string) *pubsub.Driver {
	t.Helper()
	prefix := redistest.Prefix(t)
	_, c := redistest.ACLUser(t, rules(prefix)...)
	d, err := pubsub.New(c, &pubsub.Config{Prefix: prefix, Sharded: &sharded})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenWithoutChannelPermissionFailsAtOnce: a SUBSCRIBE the ACL refuses
// is an error reply on the subscription's connection; Open returns it
// instead of waiting for a confirmation that never comes (until the
// context's deadline, or forever without one).
func TestOpenWithoutChannelPermissionFailsAtOnce(t *testing.T) {
	t.Parallel()
	for _, sharded := range []bool{false, true} {
		d := aclDriver(t, sharded, func(prefix string) []string {
			return redistest.Without(redistest.LeastPrivilege(prefix), "&"+prefix+":*")
		})
		// The deadline only bounds a failing run: the refusal must come
		// long before it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		c, err := d.Open(ctx, "q", nil)
		cancel()
		if err == nil {
			c.Close(context.Background())
			t.Fatalf("sharded %v: Open without channel permission succeeded", sharded)
		}
		if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("sharded %v: Open after %v: %v, want the NOPERM reply", sharded, time.Since(start), err)
		}
	}
}

// TestCheckNamesMissingPubSubPermissions: Check publishes and subscribes
// once, on a channel no queue uses, and names what the ACL refuses; the
// least-privilege user passes and fans out.
func TestCheckNamesMissingPubSubPermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		drop func(prefix string) []string
		want string // in the error; "" for none
	}{
		{"least privilege", func(string) []string { return nil }, ""},
		{"no channels", func(p string) []string { return []string{"&" + p + ":*"} }, "may not PUBLISH to channel"},
		{"no PUBLISH", func(string) []string { return []string{"+@pubsub"} }, "may not run PUBLISH"},
	} {
		for _, sharded := range []bool{false, true} {
			d := aclDriver(t, sharded, func(prefix string) []string {
				rules := redistest.Without(redistest.LeastPrivilege(prefix), tc.drop(prefix)...)
				if tc.name == "no PUBLISH" {
					rules = append(rules, "+subscribe", "+ssubscribe", "+unsubscribe", "+sunsubscribe")
				}
				return rules
			})
			err := d.Check(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s, sharded %v: Check: %v", tc.name, sharded, err)
			case tc.want == "":
				fansOut(t, d)
			case err == nil || !strings.Contains(err.Error(), strings.Replace(tc.want, "PUBLISH", publish(sharded), 1)):
				t.Errorf("%s, sharded %v: Check = %v, want an error saying %q", tc.name, sharded, err, tc.want)
			}
		}
	}
}

// fansOut fails t unless a message d publishes reaches a consumer of d.
func fansOut(t *testing.T, d *pubsub.Driver) {
	t.Helper()
	c := brokertest.Open(t, d, "q", nil)
	if err := d.Enqueue(context.Background(), []*broker.Message{brokertest.NewMessage("q", 0)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ds, err := c.Fetch(ctx, 1); err != nil || len(ds) != 1 {
		t.Fatalf("fetch: %d deliveries, %v", len(ds), err)
	}
}

func publish(sharded bool) string {
	if sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}
