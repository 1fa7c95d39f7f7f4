package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/conveyorq/conveyor/broker"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	in := &broker.Message{
		ID: "order:123:timeout", Kind: "order.cancel", Payload: []byte{0, 1, 2, 0xff, ','},
		Headers: map[string]string{"traceparent": "00-abc", "": "empty key"},
		Retries: 3, Recoveries: 2, MaxAttempts: 7, Timeout: 1500 * time.Millisecond,
		EnqueuedAt: time.UnixMilli(1_700_000_000_123),
	}
	data := Encode(in, 42)
	var out broker.Message
	n, err := Decode(data, &out)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if n != 42 {
		t.Fatalf("deliveries = %d, want 42", n)
	}
	if !reflect.DeepEqual(*in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", *in, out)
	}
	if !bytes.HasPrefix(data, []byte("1,42,3,2,17:order:123:timeout")) {
		t.Fatalf("header is not what Lua expects: %q", data[:40])
	}
}

// TestDecodeString: the string form decodes to the same message, and what
// it keeps is copied (a handler writing the payload must not change the
// receipt; a kept ID must not keep the whole message alive).
func TestDecodeString(t *testing.T) {
	t.Parallel()
	in := &broker.Message{
		ID: "order:1", Kind: "k", Payload: []byte("payload"),
		Headers: map[string]string{"a": "b"}, Retries: 1, MaxAttempts: 3,
	}
	s := string(Encode(in, 7))
	before := strings.Clone(s)
	var out broker.Message
	n, err := DecodeString(s, &out)
	if err != nil || n != 7 {
		t.Fatalf("DecodeString: %d, %v", n, err)
	}
	if !reflect.DeepEqual(*in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", *in, out)
	}
	out.Payload[0] = 'X'
	if s != before {
		t.Fatalf("writing the payload changed the stored string: %q", s)
	}
	// Nothing kept points into s: a kept ID must not pin the whole message.
	lo := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	for name, v := range map[string]string{"ID": out.ID, "Kind": out.Kind, "header": out.Headers["a"]} {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(v))); p >= lo && p < lo+uintptr(len(s)) {
			t.Errorf("%s shares the stored string's memory", name)
		}
	}
	for name, data := range map[string]string{"empty": "", "truncated": s[:len(s)-1]} {
		var m broker.Message
		if _, err := DecodeString(data, &m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestEmptyFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	in := &broker.Message{ID: "x", Kind: "k"}
	var out broker.Message
	if _, err := Decode(Encode(in, 0), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", *in, out)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	good := Encode(&broker.Message{ID: "id", Kind: "k", Payload: []byte("p")}, 1)
	for name, data := range map[string][]byte{
		"empty":        nil,
		"version":      []byte("2,0,0,0,2:id"),
		"short header": []byte("1,0,0"),
		"letters":      []byte("1,a,0,0,2:id"),
		"id too long":  []byte("1,0,0,0,99:id"),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte(nil), good...), 0),
		// A Timeout past time.Duration's range (about 292 years of ms)
		// would decode negative; MaxAttempts past int's, negative too.
		"timeout overflow":      withNumbers(1, uint64(math.MaxInt64/time.Millisecond)+1),
		"max attempts overflow": withNumbers(math.MaxInt64+1, 0),
	} {
		var m broker.Message
		if _, err := Decode(data, &m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// withNumbers returns a stored message whose MaxAttempts and Timeout (ms)
// fields are the given uvarints, which Encode cannot produce from a
// broker.Message when they overflow.
func withNumbers(maxAttempts, timeoutMs uint64) []byte {
	b := []byte("1,1,0,0,2:id")
	b = appendBytes(b, "k")
	b = appendBytes(b, "")
	b = binary.AppendVarint(b, 0)
	b = binary.AppendUvarint(b, maxAttempts)
	b = binary.AppendUvarint(b, timeoutMs)
	return binary.AppendUvarint(b, 0)
}

func TestDecodeDiscarded(t *testing.T) {
	t.Parallel()
	msg := Encode(&broker.Message{ID: "id", Kind: "k"}, 1)
	rec := append([]byte("d1,1700000000000,6:boom:("), msg...)
	d, err := DecodeDiscarded(rec)
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != "boom:(" || !d.At.Equal(time.UnixMilli(1700000000000)) || !bytes.Equal(d.Message, msg) {
		t.Fatalf("got %+v", d)
	}
	for _, bad := range []string{"", "d2,1,0:", "d1,x,0:", "d1,1,9:ab", "d1,1"} {
		if _, err := DecodeDiscarded([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzDecode checks that no input makes Decode panic and that whatever it
// accepts encodes back to the same bytes' meaning.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(&broker.Message{ID: "id", Kind: "k", Payload: []byte("p"), Headers: map[string]string{"a": "b"}}, 3))
	f.Add([]byte("1,0,0,0,0:"))
	f.Add([]byte("1,99999999999,0,0,1:x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m broker.Message
		n, err := Decode(data, &m)
		if err != nil {
			return
		}
		var again broker.Message
		n2, err := Decode(Encode(&m, n), &again)
		if err != nil || n2 != n || !reflect.DeepEqual(m, again) {
			t.Fatalf("re-encode of accepted input differs: %v %+v %+v", err, m, again)
		}
	})
}

// TestGroupHeaderLast checks what internal/groups' group_suffix relies on:
// a grouped message's stored form ends with the header broker.HeaderGroup
// and its group, whatever other headers it has, for names of one- and
// two-byte lengths.
func TestGroupHeaderLast(t *testing.T) {
	for _, g := range []string{"order:123", strings.Repeat("g", 127), strings.Repeat("g", 128)} {
		m := &broker.Message{ID: "x", Kind: "k", Group: g,
			Headers: map[string]string{"a": "1", "z": "2", broker.HeaderGroup: "stale"}}
		b := Encode(m, 1)
		n := binary.AppendUvarint(nil, uint64(len(g)))
		want := "\x0e" + broker.HeaderGroup + string(n) + g
		if !strings.HasSuffix(string(b), want) {
			t.Fatalf("group of %d bytes: stored form ends %q, want %q", len(g), b[max(0, len(b)-len(want)):], want)
		}
		var back broker.Message
		if _, err := Decode(b, &back); err != nil || back.Group != g || back.Headers[broker.HeaderGroup] != g {
			t.Fatalf("decoded group %q (header %q), %v; want %q", back.Group, back.Headers[broker.HeaderGroup], err, g)
		}
	}
}
