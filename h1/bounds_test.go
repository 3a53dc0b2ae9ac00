//go:build linux

package h1

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"ballast/internal/h1conformance"
)

// TestHeadBounds: heads over max_header_bytes get 431 whether they come in one read or in
// pieces; a request after a refused one on the same connection is never forwarded; a
// response head over 64 KiB is a bad gateway.
func TestHeadBounds(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	cfg := testConfig(testPool("p", "roundrobin", rb.Addr()))
	cfg.Listeners[0].MaxHeaderBytes = 4 << 10
	te := startEngine(t, cfg)
	long := "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 6<<10) + "\r\n\r\n"
	for _, pieces := range []int{1, 7, 1500} {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < len(long); p += len(long)/pieces + 1 {
			_, _ = c.Write([]byte(long[p:min(len(long), p+len(long)/pieces+1)]))
			if pieces > 1 {
				time.Sleep(time.Millisecond)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		out := make([]byte, 512)
		n, _ := c.Read(out)
		c.Close()
		if !bytes.HasPrefix(out[:n], []byte("HTTP/1.1 431 ")) {
			t.Fatalf("a %d-byte head in %d pieces: %q, want 431", len(long), pieces, out[:n])
		}
	}
	if got, _ := rb.Take(t); len(got) > 0 {
		t.Fatalf("an oversize head reached the backend: %q", got)
	}

	for _, bad := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
	} {
		out := h1conformance.Exchange(t, te.addr, []byte(bad+"GET /after HTTP/1.1\r\nHost: a\r\n\r\n"))
		if s := h1conformance.Statuses(out); s != "400" {
			t.Fatalf("%q then a GET: statuses %q, want one 400", bad, s)
		}
		if got, _ := rb.Take(t); len(got) > 0 {
			t.Fatalf("after %q the backend got %q", bad, got)
		}
	}

	sb := newScriptBackend(t, "HTTP/1.1 200 OK\r\nX-Huge: "+strings.Repeat("h", 70<<10)+"\r\n\r\n")
	cfg2 := testConfig(testPool("p", "roundrobin", sb.addr()))
	cfg2.Pools[0].Retries.Attempts = 1
	te2 := startEngine(t, cfg2)
	out := h1conformance.Exchange(t, te2.addr, []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	if s := h1conformance.Statuses(out); s != "502" {
		t.Fatalf("a 70 KiB response head: %q, want 502", out)
	}
}

// TestAnswerBeforeBody: a request answered by the engine before its body was read (no route)
// closes the connection: the body is never read as a request.
func TestAnswerBeforeBody(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	te := startEngine(t, conformanceConfig(rb.Addr()))
	hidden := "GET /api/admin HTTP/1.1\r\nHost: public.example\r\n\r\n"
	for _, req := range []string{
		"POST /nowhere HTTP/1.1\r\nHost: other.example\r\nContent-Length: " + strconv.Itoa(len(hidden)) + "\r\n\r\n" + hidden,
		"POST /nowhere HTTP/1.1\r\nHost: other.example\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(hidden)), 16) + "\r\n" + hidden + "\r\n0\r\n\r\n",
	} {
		out := h1conformance.Exchange(t, te.addr, []byte(req))
		if s := h1conformance.Statuses(out); s != "404" || !bytes.Contains(out, []byte("Connection: close")) {
			t.Fatalf("statuses %q, want one 404 that closes: %q", s, out)
		}
		if got, _ := rb.Take(t); len(got) > 0 {
			t.Fatalf("the body was forwarded as a request: %q", got)
		}
	}
}
