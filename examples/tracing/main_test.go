package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// payloadMarker is in every job's payload; no span may carry it.
const payloadMarker = "ada@example.com"

// receiver is an OTLP/HTTP trace receiver: what a collector does with
// POST /v1/traces, and nothing else.
type receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	raw     [][]byte // decompressed bodies
	gzipped int      // requests with Content-Encoding: gzip
	bad     []string // requests a collector would refuse
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) refuse(w http.ResponseWriter, code int, format string, args ...any) {
	r.mu.Lock()
	r.bad = append(r.bad, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	http.Error(w, fmt.Sprintf(format, args...), code)
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.refuse(w, http.StatusNotFound, "%s %s", req.Method, req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		r.refuse(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	var body io.Reader = req.Body
	gz := false
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.refuse(w, http.StatusBadRequest, "gzip: %v", err)
			return
		}
		defer zr.Close()
		body, gz = zr, true
	default:
		r.refuse(w, http.StatusUnsupportedMediaType, "Content-Encoding %q", enc)
		return
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		r.refuse(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		r.refuse(w, http.StatusBadRequest, "decode ExportTraceServiceRequest: %v", err)
		return
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, &msg)
	r.raw = append(r.raw, raw)
	if gz {
		r.gzipped++
	}
	r.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// span is one span as the checks see it, whichever exporter carried it.
type span struct {
	Name                    string
	Kind                    string // internal, producer, consumer, ...
	TraceID, SpanID, Parent string // hex; Parent "" for a root
	Links                   []spanRef
	Attrs                   map[string]string
	Resource                map[string]string
	StatusError             bool
	StatusMessage           string
	Events                  []string
	Start                   time.Time
}

type spanRef struct{ TraceID, SpanID string }

// wireSpans flattens what the receiver got.
func (r *receiver) wireSpans(t *testing.T) []span {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := anyAttrs(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					sp := span{
						Name:          s.GetName(),
						Kind:          strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
						TraceID:       hex.EncodeToString(s.GetTraceId()),
						SpanID:        hex.EncodeToString(s.GetSpanId()),
						Parent:        hex.EncodeToString(s.GetParentSpanId()),
						Attrs:         anyAttrs(s.GetAttributes()),
						Resource:      res,
						StatusError:   s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
						StatusMessage: s.GetStatus().GetMessage(),
						Start:         time.Unix(0, int64(s.GetStartTimeUnixNano())),
					}
					for _, l := range s.GetLinks() {
						sp.Links = append(sp.Links, spanRef{hex.EncodeToString(l.GetTraceId()), hex.EncodeToString(l.GetSpanId())})
					}
					for _, e := range s.GetEvents() {
						sp.Events = append(sp.Events, e.GetName())
					}
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

func anyAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// stdoutSpan is the JSON the stdout exporter prints per span.
type stdoutSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	SpanKind    int
	StartTime   time.Time
	Attributes  []stdoutAttr
	Resource    []stdoutAttr
	Links       []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
	Events []struct{ Name string }
	Status struct{ Code, Description string }
}

type stdoutAttr struct {
	Key   string
	Value struct {
		Type  string
		Value any
	}
}

// stdoutSpans parses the stdout exporter's output: a stream of JSON
// objects, one per span.
func stdoutSpans(t *testing.T, out []byte) []span {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	kinds := map[int]string{1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
	var spans []span
	for {
		var s stdoutSpan
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			return spans
		}
		if err != nil {
			t.Fatalf("span %d of the stdout output does not parse: %v\n%s", len(spans)+1, err, out)
		}
		sp := span{
			Name: s.Name, Kind: kinds[s.SpanKind],
			TraceID: s.SpanContext.TraceID, SpanID: s.SpanContext.SpanID, Parent: s.Parent.SpanID,
			Attrs: jsonAttrs(s.Attributes), Resource: jsonAttrs(s.Resource),
			StatusError: s.Status.Code == "Error", StatusMessage: s.Status.Description,
			Start: s.StartTime,
		}
		if sp.Parent == "0000000000000000" {
			sp.Parent = ""
		}
		for _, l := range s.Links {
			sp.Links = append(sp.Links, spanRef{l.SpanContext.TraceID, l.SpanContext.SpanID})
		}
		for _, e := range s.Events {
			sp.Events = append(sp.Events, e.Name)
		}
		spans = append(spans, sp)
	}
}

func jsonAttrs(as []stdoutAttr) map[string]string {
	m := map[string]string{}
	for _, a := range as {
		m[a.Key] = fmt.Sprint(a.Value.Value)
	}
	return m
}

// want describes a run for checkSpans.
type want struct {
	driver string
	child  bool
	out    string // the run's progress and summary lines
}

// checkSpans checks the spans of one run: a checkout span, three PRODUCER
// "send orders" spans under it, one CONSUMER "process orders" span per run
// (two for the retried job) joined to its send span by a link (or as its
// child), a "payment gateway" span under each payment run, the messaging
// attributes, service.name, and no payload.
func checkSpans(t *testing.T, spans []span, w want) {
	t.Helper()
	byName := map[string][]span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		if got := s.Resource["service.name"]; got != serviceName {
			t.Errorf("span %q: resource service.name %q, want %q", s.Name, got, serviceName)
		}
	}
	counts := map[string]int{"checkout": 1, "send " + queue: 3, "process " + queue: 4, "payment gateway": 2}
	for name, n := range counts {
		if len(byName[name]) != n {
			t.Errorf("%d spans %q, want %d", len(byName[name]), name, n)
		}
	}
	if len(spans) != 10 {
		t.Errorf("%d spans, want 10", len(spans))
	}
	if t.Failed() {
		t.Fatalf("spans: %v", spanNames(spans))
	}

	root := byName["checkout"][0]
	if root.Parent != "" || root.Kind != "internal" {
		t.Errorf("checkout span: parent %q kind %s, want a root INTERNAL span", root.Parent, root.Kind)
	}
	if !strings.Contains(w.out, "checkout: trace "+root.TraceID) {
		t.Errorf("output does not name the checkout trace %s:\n%s", root.TraceID, w.out)
	}

	producers := map[string]span{} // by message ID
	producerKinds := map[string]string{}
	for _, p := range byName["send "+queue] {
		if p.Kind != "producer" {
			t.Errorf("send span kind %s, want producer", p.Kind)
		}
		if p.TraceID != root.TraceID || p.Parent != root.SpanID {
			t.Errorf("send span in trace %s under %s, want under the checkout span %s/%s", p.TraceID, p.Parent, root.TraceID, root.SpanID)
		}
		wantAttrs(t, "send span", p.Attrs, map[string]string{
			"messaging.system": "conveyor", "messaging.operation.name": "send",
			"messaging.operation.type": "send", "messaging.destination.name": queue,
		})
		id := p.Attrs["messaging.message.id"]
		if id == "" {
			t.Errorf("send span without messaging.message.id: %v", p.Attrs)
		}
		if !strings.Contains(w.out, p.Attrs["conveyor.job.kind"]+" ") || !strings.Contains(w.out, "enqueued as "+id) {
			t.Errorf("output does not show job %s (%s) enqueued:\n%s", id, p.Attrs["conveyor.job.kind"], w.out)
		}
		producers[id] = p
		producerKinds[p.Attrs["conveyor.job.kind"]] = id
	}
	if len(producers) != 3 || len(producerKinds) != 3 {
		t.Fatalf("send spans name %d message IDs and %d kinds, want 3 each", len(producers), len(producerKinds))
	}

	runs := map[string][]span{} // process spans by kind, in attempt order
	for _, c := range byName["process "+queue] {
		if c.Kind != "consumer" {
			t.Errorf("process span kind %s, want consumer", c.Kind)
		}
		want := map[string]string{
			"messaging.system": "conveyor", "messaging.operation.name": "process",
			"messaging.operation.type": "process", "messaging.destination.name": queue,
		}
		if w.driver == "stream" {
			want["messaging.consumer.group.name"] = "conveyor"
		} else if g, ok := c.Attrs["messaging.consumer.group.name"]; ok {
			t.Errorf("%s driver process span has a consumer group %q", w.driver, g)
		}
		wantAttrs(t, "process span", c.Attrs, want)
		id := c.Attrs["messaging.message.id"]
		p, ok := producers[id]
		if !ok {
			t.Errorf("process span for message %q that no send span sent", id)
			continue
		}
		if kind := c.Attrs["conveyor.job.kind"]; kind != p.Attrs["conveyor.job.kind"] {
			t.Errorf("process span of %s has kind %q, its send span %q", id, kind, p.Attrs["conveyor.job.kind"])
		}
		if w.child {
			if c.TraceID != p.TraceID || c.Parent != p.SpanID || len(c.Links) != 0 {
				t.Errorf("process span of %s: trace %s parent %s links %v; want a child of send span %s/%s",
					id, c.TraceID, c.Parent, c.Links, p.TraceID, p.SpanID)
			}
		} else {
			if len(c.Links) != 1 || c.Links[0] != (spanRef{p.TraceID, p.SpanID}) {
				t.Errorf("process span of %s links %v, want one link to send span %s/%s", id, c.Links, p.TraceID, p.SpanID)
			}
			if c.Parent != "" || c.TraceID == p.TraceID {
				t.Errorf("linked process span of %s: parent %q trace %s; want the root of a trace of its own", id, c.Parent, c.TraceID)
			}
		}
		kind := c.Attrs["conveyor.job.kind"]
		runs[kind] = append(runs[kind], c)
	}
	for kind, n := range map[string]int{kindEmail: 1, kindPayment: 2, kindReminder: 1} {
		if len(runs[kind]) != n {
			t.Errorf("%d process spans of %s, want %d", len(runs[kind]), kind, n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	pay := runs[kindPayment]
	if pay[0].Attrs["conveyor.job.attempt"] != "1" {
		pay[0], pay[1] = pay[1], pay[0]
	}
	failed, retried := pay[0], pay[1]
	if failed.Attrs["conveyor.job.attempt"] != "1" || retried.Attrs["conveyor.job.attempt"] != "2" {
		t.Errorf("payment runs have attempts %q and %q, want 1 and 2", failed.Attrs["conveyor.job.attempt"], retried.Attrs["conveyor.job.attempt"])
	}
	if !failed.StatusError || failed.StatusMessage != "payment gateway timed out" ||
		failed.Attrs["error.type"] == "" || failed.Attrs["conveyor.job.outcome"] != "retried" ||
		len(failed.Events) != 1 || failed.Events[0] != "conveyor.job.retry" {
		t.Errorf("failed payment run: status error %v %q, error.type %q, outcome %q, events %v; want an error, its type, a retry",
			failed.StatusError, failed.StatusMessage, failed.Attrs["error.type"], failed.Attrs["conveyor.job.outcome"], failed.Events)
	}
	for _, ok := range []span{retried, runs[kindEmail][0], runs[kindReminder][0]} {
		if ok.StatusError || ok.Attrs["conveyor.job.outcome"] != "acked" || ok.Attrs["conveyor.job.attempt"] == "" {
			t.Errorf("%s run %s: status error %v, outcome %q; want acked", ok.Attrs["conveyor.job.kind"], ok.Attrs["conveyor.job.attempt"], ok.StatusError, ok.Attrs["conveyor.job.outcome"])
		}
	}
	// The delayed job cannot start before its delay from the checkout
	// (which began before it was enqueued); a little slack for timer
	// scores kept in whole milliseconds.
	if late := runs[kindReminder][0].Start.Sub(root.Start); late < 200*time.Millisecond-5*time.Millisecond {
		t.Errorf("delayed job ran %v after the checkout began, before its 200ms delay", late)
	}

	gateways := map[string]span{}
	for _, g := range byName["payment gateway"] {
		gateways[g.Parent] = g
	}
	for _, run := range pay {
		g, ok := gateways[run.SpanID]
		if !ok || g.TraceID != run.TraceID {
			t.Errorf("no payment gateway span under payment run %s (attempt %s)", run.SpanID, run.Attrs["conveyor.job.attempt"])
			continue
		}
		if g.StatusError != (run.Attrs["conveyor.job.attempt"] == "1") {
			t.Errorf("payment gateway span of attempt %s: error %v", run.Attrs["conveyor.job.attempt"], g.StatusError)
		}
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, payloadMarker) {
				t.Errorf("span %q attribute %s carries payload text: %q", s.Name, k, v)
			}
		}
	}
	for _, line := range []string{
		"spans: 10 ended, 10 exported to ",
		"metrics: sent=3 processed=4 failed=1 retried=1 discarded=0; queue orders now: ready=0 in_flight=0 delayed=0 discarded=0",
	} {
		if !strings.Contains(w.out, line) {
			t.Errorf("output lacks %q:\n%s", line, w.out)
		}
	}
}

func wantAttrs(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", what, k, got[k], v, got)
		}
	}
}

func spanNames(spans []span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runOTLP runs the example against the test Redis, exporting to rcv, and
// checks what arrived over the wire once run has returned: run shuts the
// tracer provider down, so nothing may still be on its way.
func runOTLP(t *testing.T, rcv *receiver, w want, cfg config) {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var out drivertest.Buffer
	cfg.Redis, cfg.Driver, cfg.ChildSpans, cfg.Prefix, cfg.Out = rdb, w.driver, w.child, prefix, &out
	start := time.Now()
	if err := run(testCtx(t), cfg); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.Bytes())
	}
	took := time.Since(start)
	w.out = string(out.Bytes())

	spans := rcv.wireSpans(t)
	rcv.mu.Lock()
	bad, nreq, raw := rcv.bad, len(rcv.reqs), bytes.Join(rcv.raw, nil)
	rcv.mu.Unlock()
	if len(bad) != 0 {
		t.Errorf("receiver refused requests: %v", bad)
	}
	if bytes.Contains(raw, []byte(payloadMarker)) {
		t.Errorf("an export request carries the job payload %q", payloadMarker)
	}
	if strings.Contains(w.out, `"Name"`) {
		t.Errorf("spans printed while exporting over OTLP:\n%s", w.out)
	}
	checkSpans(t, spans, w)
	if keys := redistest.AllKeys(t, rdb, prefix); len(keys) != 0 {
		t.Errorf("run left keys behind: %v", keys)
	}
	t.Logf("%s: %d spans in %d OTLP/HTTP requests (%d bytes), run took %v", w.driver, len(spans), nreq, len(raw), took.Round(time.Millisecond))
}

// TestOTLPOverTheWire: the example's spans reach an OTLP/HTTP receiver,
// on both durable drivers, linked and as children.
func TestOTLPOverTheWire(t *testing.T) {
	t.Parallel()
	for _, w := range []want{{driver: "list"}, {driver: "stream"}, {driver: "list", child: true}} {
		name := w.driver
		if w.child {
			name += "/child"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t)
			url := rcv.srv.URL + "/v1/traces"
			runOTLP(t, rcv, w, config{OTLPEndpoint: url})
		})
	}
}

// TestOTLPFromEnvironment: OTEL_EXPORTER_OTLP_ENDPOINT alone (a base URL:
// the exporter adds /v1/traces) sends the spans over OTLP/HTTP, and the
// exporter's other variables apply (gzip here). Not parallel: it sets the
// process environment.
func TestOTLPFromEnvironment(t *testing.T) {
	rcv := newReceiver(t)
	t.Setenv(envEndpoint, rcv.srv.URL)
	t.Setenv(envTracesEndpoint, "")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	runOTLP(t, rcv, want{driver: "list"}, config{})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.gzipped == 0 || rcv.gzipped != len(rcv.reqs) {
		t.Errorf("%d of %d requests gzipped, want all (OTEL_EXPORTER_OTLP_COMPRESSION=gzip)", rcv.gzipped, len(rcv.reqs))
	}
}

// TestStdoutOnEmbeddedRedis: with no endpoint the spans are printed as
// JSON the test can parse, here on the embedded Redis the example falls
// back to, which shows too that the run leaves no key behind.
func TestStdoutOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	var out, spanOut drivertest.Buffer
	// Stdout: a developer's OTEL_EXPORTER_OTLP_ENDPOINT must not send
	// the test's spans elsewhere.
	err := run(testCtx(t), config{Redis: rdb, Stdout: true, ChildSpans: true, Out: &out, SpanOut: &spanOut})
	if err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.Bytes())
	}
	printed := spanOut.Bytes()
	if bytes.Contains(printed, []byte(payloadMarker)) {
		t.Errorf("printed spans carry the job payload %q", payloadMarker)
	}
	// Pretty-printed: one field per line, indented.
	if !regexp.MustCompile(`(?m)^\t"Name": "process orders",$`).Match(printed) {
		t.Errorf("spans not pretty-printed JSON:\n%.2000s", printed)
	}
	spans := stdoutSpans(t, printed)
	w := want{driver: "list", child: true, out: string(out.Bytes())}
	checkSpans(t, spans, w)
	if !strings.Contains(w.out, "exported to stdout") {
		t.Errorf("summary does not say the spans went to stdout:\n%s", w.out)
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("run left keys behind: %v", keys)
	}
	t.Logf("stdout: %d spans, %d bytes of JSON", len(spans), len(printed))
}

// TestExportFailureFails: spans a collector refused make the run fail
// (the exporter only logs its errors), so that the example cannot claim a
// trace it did not deliver.
func TestExportFailureFails(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "refused by the test", http.StatusBadRequest) // not retried
	}))
	defer srv.Close()
	var out drivertest.Buffer
	err := run(testCtx(t), config{
		Redis: redistest.Client(t), Prefix: redistest.Prefix(t),
		OTLPEndpoint: srv.URL + "/v1/traces", Out: &out,
	})
	if err == nil || !strings.Contains(err.Error(), "0 of 10 spans exported to OTLP/HTTP "+srv.URL+"/v1/traces") {
		t.Fatalf("run = %v, want an error saying no span was exported\noutput:\n%s", err, out.Bytes())
	}
	if posts.Load() == 0 {
		t.Fatal("the exporter never posted to the collector")
	}
}
