//go:build linux

package h1

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"ballast/internal/h1conformance"
)

// TestHeadInPieces is the fasthttp plane's TestHeadConnScan (its bare-LF watch in front of
// fasthttp) as the engine's client meets it: however the bytes of a head arrive (at once, or
// in pieces of 1, 2 or 3 bytes, each its own write), the engine's verdict is the same: a head
// ending in CRLF CRLF is served (bare LFs inside are taken, empty lines before the request
// line skipped), one whose last line or blank line ends in a bare LF is refused at once (400,
// not a wait for read_header_timeout), and one that has not ended is still waited for.
func TestHeadInPieces(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	cfg := testConfig(testPool("p", "roundrobin", rb.Addr()))
	cfg.Listeners[0].ReadHeaderTimeout = dur(3 * time.Second)
	te := startEngine(t, cfg)
	for _, tc := range []struct {
		head   string
		status int // 0: no answer yet (the head is still being read)
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		{"GET / HTTP/1.1\nHost: a\r\n\r\n", 200}, // bare LF inside: taken
		{"GET / HTTP/1.1\r\nHost: a\n\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\r\n\n", 400},
		{"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 200}, // an empty line first is skipped
		{"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		{"\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		{"GET / HTTP/1.1\r\nHost: a\r\n", 0},
	} {
		for _, step := range []int{0, 1, 2, 3} {
			c, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			in := []byte(tc.head)
			if step == 0 {
				_, _ = c.Write(in)
			} else {
				for i := 0; i < len(in); i += step {
					if _, err := c.Write(in[i:min(i+step, len(in))]); err != nil {
						break // refused (and closed) part-way: its answer is read below
					}
					time.Sleep(time.Millisecond) // each piece its own read on the engine's side
				}
			}
			wait := 2 * time.Second
			if tc.status == 0 {
				wait = 300 * time.Millisecond // well within read_header_timeout
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			got := 0
			if err == nil {
				got = resp.StatusCode
				resp.Body.Close()
			}
			if got != tc.status {
				t.Errorf("%q in pieces of %d: status %d (%v), want %d", tc.head, step, got, err, tc.status)
			}
			c.Close()
		}
	}
}

// FuzzHeadEnd is the fasthttp plane's FuzzHeadConnScan for the engine's head scanner: however
// the bytes arrive (in pieces of 1 to 8 bytes, the scan resumed as the client's reads do), the
// end found is the one found over the bytes at once, and an end is never inside the empty
// lines before the request line.
func FuzzHeadEnd(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n\r\nGET / HTTP/1.1\r\n\r\n", "\n\nGET / HTTP/1.1\r\nHost: a\n\n",
		"GET / HTTP/1.1\nHost: a\r\n\r\nbody\n\n", "\r\n", "GET / HTTP/1.1\r\nHost: a\r\n"} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		st := int(step%8) + 1
		var s0 int
		whole := headEnd(b, &s0)
		scan, got := 0, 0
		for k := min(st, len(b)); ; k = min(k+st, len(b)) {
			if got = headEnd(b[:k], &scan); got > 0 || k == len(b) {
				break
			}
		}
		if got != whole {
			t.Fatalf("%q in pieces of %d: end %d, at once %d", b, st, got, whole)
		}
		if whole > 0 && skipEmptyLines(b[:whole]) == whole {
			t.Fatalf("%q: the end %d is inside the empty lines before the request line", b, whole)
		}
	})
}
