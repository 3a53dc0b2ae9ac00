//go:build linux

package h1

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/internal/h1conformance"
	"ballast/upstream"
)

// TestH2CSniffRaw: on an h2c listener the engine tells HTTP/1.1 from HTTP/2 by the first
// bytes and serves HTTP/1.1 itself, those bytes its first input, whatever pieces they come
// in: a request line, empty lines before it (RFC 9112 §2.2, also on a plain listener), a
// "PRI" method with an HTTP/1 version (400: not the preface), a preface with its last
// bytes wrong (an HTTP/2.0 request line: 505), a request line past max_header_bytes (431);
// bytes that are neither are closed without an answer. Each case is sent whole and in
// pieces of one to three bytes (the sniffing and the head's end resume across reads).
func TestH2CSniffRaw(t *testing.T) {
	backend := echoBackend(t)
	h2c, ctr := h2cEngine(t, testConfig(testPool("p", "roundrobin", backend)), nil)
	plain := startEngine(t, testConfig(testPool("p", "roundrobin", backend)))
	const get = "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name, raw, want string // want: the answer's status line prefix; "" no answer
		plainToo        bool
	}{
		{"request line", get, "HTTP/1.1 200 ", true},
		{"PUT, shares the preface's P", "PUT /s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab", "HTTP/1.1 200 ", true},
		{"one empty line first", "\r\n" + get, "HTTP/1.1 200 ", true},
		{"three empty lines first", "\r\n\r\n\n" + get, "HTTP/1.1 200 ", true},
		{"PRI with an HTTP/1 version", "PRI * HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 ", true},
		{"a preface whose end is wrong", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", "HTTP/1.1 505 ", false},
		{"request line past max_header_bytes", "GET /" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 431 ", true},
		{"a TLS ClientHello", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\n", "", false},
		{"not a request line", "hello world\r\nHost: x\r\n\r\n", "", false},
		{"a request line cut short", "GET /s HTTP/1.1", "", false},
		{"an invalid preface (h2spec 3.5)", "INVALID CONNECTION PREFACE\r\n\r\n", "", false},
		{"a request line ended by a bare LF", "GET /s HTTP/1.1\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 200 ", true},
		{"nothing", "", "", true},
	} {
		listeners := []*testEngine{h2c}
		if tc.plainToo {
			listeners = append(listeners, plain)
		}
		for i, te := range listeners {
			where := tc.name + map[bool]string{true: " (h2c)", false: " (plain)"}[i == 0]
			if out := string(te.exchangeRaw(t, []byte(tc.raw))); !strings.HasPrefix(out, tc.want) || tc.want == "" && out != "" {
				t.Errorf("%s, whole: got %q, want %q", where, out[:min(len(out), 60)], tc.want)
			}
			if out := exchangeTrickle(t, te.addr, tc.raw); !strings.HasPrefix(out, tc.want) || tc.want == "" && out != "" {
				t.Errorf("%s, in pieces: got %q, want %q", where, out[:min(len(out), 60)], tc.want)
			}
		}
	}
	if n := ctr.Streams.Load(); n != 0 {
		t.Errorf("%d HTTP/2 streams: an HTTP/1.1 connection was taken for HTTP/2", n)
	}
}

// exchangeTrickle sends raw in pieces of one to three bytes (the head's first 64 bytes; the
// rest at once) with a pause between, half-closes and returns all that comes back.
func exchangeTrickle(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for i, n := 0, 1; i < len(raw); n = n%3 + 1 {
		end := min(i+n, len(raw))
		if i >= 64 {
			end = len(raw)
		}
		if _, err := io.WriteString(c, raw[i:end]); err != nil {
			break // an answer and a close may come before the rest is sent
		}
		i = end
		time.Sleep(2 * time.Millisecond)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	out, _ := io.ReadAll(c)
	return string(out)
}

// TestH2CPrefaceInPieces: the client preface arriving a few bytes at a time (its first 18
// bytes an HTTP/1 head of their own) still makes an HTTP/2 connection, whose stream is served.
func TestH2CPrefaceInPieces(t *testing.T) {
	te, ctr := h2cEngine(t, testConfig(testPool("p", "roundrobin", echoBackend(t))), nil)
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < len(http2.ClientPreface); i += 3 {
		if _, err := io.WriteString(c, http2.ClientPreface[i:min(i+3, len(http2.ClientPreface))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := &rawH2{c: c, fr: http2.NewFramer(c, c), dec: hpack.NewDecoder(4096, nil)}
	r.enc = hpack.NewEncoder(&r.buf)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	r.get(t, 1, "/pieces")
	if st, body := r.response(t, 1); st != "200" || body != "body:/pieces" {
		t.Errorf("stream 1: %s %q", st, body)
	}
	if n := ctr.Streams.Load(); n != 1 {
		t.Errorf("%d streams counted, want 1", n)
	}
}

// FuzzH2CRequestHead is FuzzRequestHead on an h2c listener: whatever does not open with the
// whole HTTP/2 preface is HTTP/1.1 (or closed), and keeps the invariant of the request path
// (h1conformance.CheckForwarded); the sniffing never forwards what a strict reading would not.
func FuzzH2CRequestHead(f *testing.F) {
	h1conformance.AddSeeds(f)
	for _, s := range []string{"PRI * HTTP/1.1\r\nHost: a\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"} {
		f.Add([]byte(s))
	}
	tp, _ := h2cEngine(f, testConfig(testPool("p", "roundrobin", h1conformance.NewRawBackend(f).Addr())), nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if bytes.HasPrefix(raw, []byte(http2.ClientPreface)) {
			t.Skip("HTTP/2: TestH2CRequests and h2spec's domain")
		}
		rb := h1conformance.NewRawBackend(t)
		cfg := testConfig(testPool("p", "roundrobin", rb.Addr()))
		cfg.Listeners[0].Address, cfg.Listeners[0].H2C = tp.addr, true
		pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := tp.Swap(cfg, map[string]*upstream.Pool{"p": pool}); err != nil {
			t.Fatal(err)
		}
		out := h1conformance.Exchange(t, tp.addr, raw)
		got, fwd := rb.Take(t)
		h1conformance.CheckForwarded(t, raw, out, got, fwd)
	})
}
