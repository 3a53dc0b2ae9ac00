//go:build linux

package h1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEarlyAnswerDrain: after a backend's early answer to an upload (413 after the headers,
// the body unread), a client with at most maxEarlyDrain bytes of its body left keeps its
// connection: the rest is read and dropped as it comes, then the next request is served; a
// client that stops sending the rest has the connection closed at its body timeout
// (idle_timeout), counted. A body with more left closes after the answer
// (TestEarlyResponseToUpload).
func TestEarlyAnswerDrain(t *testing.T) {
	addr, refused := refusingBackend(t)
	cfg := testConfig(testPool("u", "roundrobin", addr))
	cfg.Listeners[0].IdleTimeout = dur(500 * time.Millisecond)
	te := startEngine(t, cfg)
	const length, first = 300000, 100000 // more than the engine reads before a backend is picked
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("client stops %v", stop), func(t *testing.T) {
			before, timeouts := refused.Load(), te.Stats().BodyTimeouts
			c, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", length, strings.Repeat("b", first))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 || string(body) != "too large" || resp.Close {
				t.Fatalf("%d %q close=%v, want 413 %q on a kept connection", resp.StatusCode, body, resp.Close, "too large")
			}
			if n := refused.Load() - before; n != 1 {
				t.Fatalf("the backend refused %d uploads, want 1", n)
			}
			if stop {
				if n, err := br.ReadByte(); err == nil {
					t.Fatalf("read %q: the connection stayed open without the rest of the body", n)
				}
				waitFor(t, "the body timeout counted", func() bool { return te.Stats().BodyTimeouts == timeouts+1 })
				return
			}
			// The rest of the body in pieces, the next request right behind it.
			rest := strings.Repeat("c", length-first)
			for len(rest) > 0 {
				k := min(len(rest), 30000)
				if _, err := io.WriteString(c, rest[:k]); err != nil {
					t.Fatal(err)
				}
				rest = rest[k:]
			}
			if _, err := io.WriteString(c, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the request after the drained body: %v", err)
			}
			body, _ = io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "next" {
				t.Fatalf("the request after the drained body: %d %q", resp.StatusCode, body)
			}
		})
	}
	waitFor(t, "in-flight back to 0", func() bool { return inflight(te.pools["u"]) == 0 })
}
