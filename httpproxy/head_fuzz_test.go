package httpproxy

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"ballast/internal/h1conformance"
	"ballast/upstream"
)

// FuzzRequestHead writes arbitrary bytes to a real listener and checks the invariant of the
// request path: what the backend receives frames the same requests, in order, as a strict
// reading of what the client sent (same method, target byte for byte, host, body), each
// answered 200 by the backend; a request not forwarded gets a 4xx (or 505) or no answer, and
// nothing after it is forwarded. Bytes the backend cannot frame are allowed only as the cut
// forwarding of a client request that was itself incomplete or broken in its body.
func FuzzRequestHead(f *testing.F) {
	for _, row := range h1conformance.Rows {
		f.Add([]byte(row.Req))
	}
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n"))
	tp := startProxy(f, testConfig(testPool("p", "roundrobin", newRawBackend(f).addr())))
	f.Fuzz(func(t *testing.T, raw []byte) {
		// A fresh backend (and pool) per input: bytes of an earlier input that reach a backend
		// after its check (a broken body the proxy cuts and closes) cannot count for this one.
		rb := newRawBackend(t)
		cfg := testConfig(testPool("p", "roundrobin", rb.addr())) // every request has a route
		cfg.Listeners[0].Address = tp.addr
		pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := tp.Swap(cfg, map[string]*upstream.Pool{"p": pool}); err != nil {
			t.Fatal(err)
		}
		out := exchangeRaw(t, tp.addr, raw)
		got, fwd := rb.take(t)
		checkForwarded(t, raw, out, got, fwd)
	})
}

var finalStatus = regexp.MustCompile(`HTTP/1\.[01] ([2-5]\d\d) `)

// checkForwarded checks the invariant of FuzzRequestHead for one connection: client bytes raw,
// the proxy's answer out, the backend's bytes got and the requests it framed in them.
func checkForwarded(t *testing.T, raw, out, got []byte, fwd []strictReq) {
	t.Helper()
	sent, _, stop := readAllStrict(raw, true)
	var codes []string
	for _, m := range finalStatus.FindAllSubmatch(out, -1) {
		codes = append(codes, string(m[1]))
	}
	if len(fwd) > len(sent) {
		t.Fatalf("backend framed %d requests, the client sent %d complete ones (%v)\nclient: %q\nbackend: %q", len(fwd), len(sent), stop, raw, got)
	}
	framed := 0
	for i, b := range fwd {
		framed += len(b.raw)
		c := sent[i]
		if b.method != c.method || b.target != c.target || !bytes.Equal(b.body, c.body) {
			t.Fatalf("request %d: client sent %s %q with body %q, backend got %s %q with body %q\nclient: %q\nbackend: %q",
				i, c.method, c.target, c.body, b.method, b.target, b.body, raw, got)
		}
		if want, ok := wantHost(c); ok && (len(b.hosts) != 1 || !strings.EqualFold(b.hosts[0], want)) {
			t.Fatalf("request %d: backend got Host %q, want %q\nclient: %q\nbackend: %q", i, b.hosts, want, raw, got)
		}
	}
	if framed < len(got) && len(fwd) == len(sent) && stop == nil {
		t.Fatalf("backend got bytes it cannot frame after %d requests that were all complete\nclient: %q\nbackend: %q", len(fwd), raw, got)
	}
	if len(codes) < len(fwd) {
		t.Fatalf("%d requests forwarded but %d answers\nclient: %q\nanswer: %q", len(fwd), len(codes), raw, out)
	}
	for i, code := range codes {
		switch {
		case i < len(fwd) && code != "200":
			t.Fatalf("answer %d is %s for a forwarded request (backend answers 200)\nclient: %q\nanswer: %q", i, code, raw, out)
		case i == len(fwd) && !(code[0] == '4' || code == "505"):
			t.Fatalf("a request not forwarded got %s, want 4xx or 505\nclient: %q\nanswer: %q", code, raw, out)
		case i > len(fwd):
			t.Fatalf("answers after a refused request: %q\nclient: %q", codes, raw)
		}
	}
}

// wantHost is the Host a forwarded request must carry: the authority of an absolute-form
// target, else the client's Host; ok is false when the client sent neither.
func wantHost(r strictReq) (string, bool) {
	if _, rest, ok := strings.Cut(r.target, "://"); ok && r.target[0] != '/' {
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		return rest, true
	}
	if len(r.hosts) == 1 {
		return r.hosts[0], true
	}
	return "", false
}
