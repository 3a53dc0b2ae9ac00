package h1conformance

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// Run writes each row of the table with xfer (the raw bytes on a fresh connection of the
// listener under test, its answer up to the close), whose configuration routes as RouteHost
// and RoutePrefix say to a pool whose only backend is rb, and checks the client's statuses and
// every byte rb receives; https says the client spoke TLS (the forwarded fields then name
// https).
func Run(t *testing.T, xfer func(t testing.TB, raw []byte) []byte, rb *RawBackend, https bool) {
	for _, tc := range Rows {
		t.Run(tc.Name, func(t *testing.T) {
			out := xfer(t, []byte(tc.Req))
			got, _ := rb.Take(t)
			if s := Statuses(out); s != tc.Status {
				t.Errorf("statuses %q, want %q; response:\n%s", s, tc.Status, out)
			}
			want := strings.ReplaceAll(tc.Backend, "BACKEND", rb.Addr())
			if https { // the same bytes, with the scheme the client used
				want = strings.NewReplacer("X-Forwarded-Proto: http\r", "X-Forwarded-Proto: https\r", "proto=http;", "proto=https;", "proto=http\r", "proto=https\r").Replace(want)
			}
			if string(got) != want {
				t.Errorf("backend received:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}

// AddSeeds adds the table's requests and a few framing cases to a fuzz target's corpus.
func AddSeeds(f *testing.F) {
	for _, row := range Rows {
		f.Add([]byte(row.Req))
	}
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n"))
}

var finalStatus = regexp.MustCompile(`HTTP/1\.[01] ([2-5]\d\d) `)

// CheckForwarded checks the invariant of the request path for one connection: what the
// backend receives frames the same requests, in order, as a strict reading of what the
// client sent (same method, target byte for byte, host, body), each answered 200 by the
// backend; a request not forwarded gets a 4xx (or 505) or no answer, and nothing after it is
// forwarded. Bytes the backend cannot frame are allowed only as the cut forwarding of a
// client request that was itself incomplete or broken in its body. raw is what the client
// wrote, out the proxy's answer, got the backend's bytes and fwd the requests it framed in
// them.
func CheckForwarded(t *testing.T, raw, out, got []byte, fwd []Request) {
	t.Helper()
	sent, _, stop := ReadAllStrict(raw, true)
	var codes []string
	for _, m := range finalStatus.FindAllSubmatch(out, -1) {
		codes = append(codes, string(m[1]))
	}
	if len(fwd) > len(sent) {
		t.Fatalf("backend framed %d requests, the client sent %d complete ones (%v)\nclient: %q\nbackend: %q", len(fwd), len(sent), stop, raw, got)
	}
	framed := 0
	for i, b := range fwd {
		framed += len(b.Raw)
		c := sent[i]
		if b.Method != c.Method || b.Target != c.Target || !bytes.Equal(b.Body, c.Body) {
			t.Fatalf("request %d: client sent %s %q with body %q, backend got %s %q with body %q\nclient: %q\nbackend: %q",
				i, c.Method, c.Target, c.Body, b.Method, b.Target, b.Body, raw, got)
		}
		if want, ok := wantHost(c); ok && (len(b.Hosts) != 1 || !strings.EqualFold(b.Hosts[0], want)) {
			t.Fatalf("request %d: backend got Host %q, want %q\nclient: %q\nbackend: %q", i, b.Hosts, want, raw, got)
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
func wantHost(r Request) (string, bool) {
	if _, rest, ok := strings.Cut(r.Target, "://"); ok && r.Target[0] != '/' {
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		return rest, true
	}
	if len(r.Hosts) == 1 {
		return r.Hosts[0], true
	}
	return "", false
}
