package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// A handler is a function: test it as one.
func TestSendReceipt(t *testing.T) {
	t.Parallel()
	mail := &Mailer{}
	h := &Receipts{Mail: mail}
	job := conveyor.NewJob(&broker.Delivery{Message: broker.Message{ID: "1", Kind: "email.receipt"}}, nil)

	if err := h.Send(context.Background(), job, Receipt{OrderID: "1001", Email: "ada@example.com"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := mail.Sent(); len(got) != 1 || got[0] != "ada@example.com: Your receipt for order 1001" {
		t.Fatalf("sent %q", got)
	}
	err := h.Send(context.Background(), job, Receipt{OrderID: "1002"})
	if !conveyor.IsSkipRetry(err) {
		t.Fatalf("Send without an address = %v, want a SkipRetry error", err)
	}
}

// The wiring too, with no Redis: the job goes through the mux as a pool
// would run it, and is settled by the pool's rules.
func TestReceiptThroughTheMux(t *testing.T) {
	t.Parallel()
	d, err := conveyortest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	mail := &Mailer{}
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", (&Receipts{Mail: mail}).Send)
	runner, err := conveyortest.NewRunner(d, mux, nil)
	if err != nil {
		t.Fatal(err)
	}

	res, err := runner.Process(context.Background(), "email.receipt", Receipt{OrderID: "1001", Email: "ada@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Settlement.Outcome != conveyor.OutcomeAcked || len(mail.Sent()) != 1 {
		t.Fatalf("job %v, sent %q; want it acked and one mail sent", res.Settlement.Outcome, mail.Sent())
	}
	res, err = runner.Process(context.Background(), "email.receipt", Receipt{OrderID: "1002"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Settlement.Outcome != conveyor.OutcomeDiscarded {
		t.Fatalf("a receipt without an address was %v, want it discarded", res.Settlement.Outcome)
	}
}

// checkProgram runs the guide's program and checks what it prints.
func checkProgram(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, rdb, prefix, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^enqueued email.receipt as job [0-9A-Z]{26}$`),
		regexp.MustCompile(`(?m)^sent to ada@example.com \(try 1\): Your receipt for order 1001$`),
		regexp.MustCompile(`(?m)^reminder for order 1002 cancelled before it fired: true$`),
		regexp.MustCompile(`(?m)^send to bob@flaky.example failed \(try 1\): smtp flaky.example: 451 try again later$`),
		regexp.MustCompile(`(?m)^sent to bob@flaky.example \(try 2\): Your receipt for order 1004$`),
		regexp.MustCompile(`(?m)^send to eve@down.example failed \(try 3\): smtp down.example: connection refused$`),
		regexp.MustCompile(`(?m)^discarded [0-9A-Z]{26} \(email.receipt\): smtp down.example: connection refused$`),
		regexp.MustCompile(`(?m)^sent to customer-of-1003@example.com \(try 1\): Your order 1003 is waiting for payment$`),
		regexp.MustCompile(`(?m)^in the discard queue: [0-9A-Z]{26} email.receipt after attempt 3: smtp down.example: connection refused$`),
		regexp.MustCompile(`(?m)^re-drove 1 job\(s\)$`),
		regexp.MustCompile(`(?m)^sent to eve@down.example \(try 4\): Your receipt for order 1004$`),
		regexp.MustCompile(`(?m)^queue emails: ready=0 in_flight=0 delayed=0 discarded=0 processed=4 failed=4$`),
	} {
		if !want.MatchString(got) {
			t.Errorf("output does not match %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "customer-of-1002") {
		t.Errorf("the cancelled reminder was sent:\n%s", got)
	}
}

func TestProgramOnRealRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	checkProgram(t, rdb, redistest.Prefix(t))
}

func TestProgramOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	checkProgram(t, rdb, "gs")
}

// Every Go block of docs/getting-started.md is a piece of this package,
// line for line (indentation aside), so the guide's code compiles and runs.
func TestGuideCodeIsThisProgram(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, f := range []string{"main.go", "main_test.go", "example_test.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, "\n"+strings.Join(trimmedLines(string(b)), "\n")+"\n")
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(guide), -1)
	if len(blocks) < 10 {
		t.Fatalf("%d Go blocks in the guide; want its ten or more", len(blocks))
	}
	for _, b := range blocks {
		block := "\n" + strings.Join(trimmedLines(b[1]), "\n") + "\n"
		found := false
		for _, s := range sources {
			found = found || strings.Contains(s, block)
		}
		if !found {
			t.Errorf("this block of the guide is in none of main.go, main_test.go, example_test.go:\n%s", b[1])
		}
	}
}

// trimmedLines returns the non-empty lines of s without their leading and
// trailing blanks.
func trimmedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
