//go:build linux

package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTrickledResponseStreamsPlanes is TestTrickledResponseStreams (issue 8 item 6, the fasthttp
// plane's test) over the engine's other planes: HTTP/1.1 over TLS (records on the shard) and
// h2c streams on the shards. A response body the backend sends piece by piece reaches the
// client piece by piece; ordered by events, not timed: the backend sends the next piece only
// once the client has reported the previous one (or after a bounded wait that fails the test).
func TestTrickledResponseStreamsPlanes(t *testing.T) {
	tests := []struct {
		name   string
		header string   // response head up to the blank line
		pieces []string // what the backend writes, one at a time
		want   []string // what the client must have received after each piece
	}{
		{"small content-length", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n",
			[]string{"a", "b", "c", "d"}, []string{"a", "b", "c", "d"}},
		{"large content-length", "HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n",
			[]string{"head", strings.Repeat("x", 19996)}, []string{"head", strings.Repeat("x", 19996)}},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
			[]string{"1\r\na\r\n", "1\r\nb\r\n", "0\r\n\r\n"}, []string{"a", "b", ""}},
		{"until close", "HTTP/1.1 200 OK\r\nConnection: close\r\n",
			[]string{"a", "b", "c"}, []string{"a", "b", "c"}},
	}
	planes := []struct {
		name  string
		start func(t *testing.T, backend string) *testEngine
		get   func(t *testing.T, te *testEngine) *http.Response
	}{
		{"tls", func(t *testing.T, backend string) *testEngine {
			return startTLSEngine(t, testConfig(testPool("s", "roundrobin", backend)))
		}, func(t *testing.T, te *testEngine) *http.Response {
			c := dialTLS(t, te.addr, "http/1.1")
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}},
		{"h2c", func(t *testing.T, backend string) *testEngine {
			te, _ := h2cEngine(t, testConfig(testPool("s", "roundrobin", backend)), nil)
			return te
		}, func(t *testing.T, te *testEngine) *http.Response {
			resp, err := h2cClient().Get(te.url("/events"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 {
				t.Fatalf("served over %s, want HTTP/2", resp.Proto)
			}
			return resp
		}},
	}
	for _, pl := range planes {
		for _, tc := range tests {
			t.Run(pl.name+"/"+tc.name, func(t *testing.T) {
				got := make(chan struct{}, len(tc.pieces))
				late := make(chan int, len(tc.pieces))
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ln.Close() })
				go func() {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(20 * time.Second))
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					_, _ = io.WriteString(c, tc.header+"\r\n")
					for i, p := range tc.pieces {
						if _, err := io.WriteString(c, p); err != nil {
							return
						}
						if i == len(tc.pieces)-1 {
							break
						}
						select {
						case <-got:
						case <-time.After(5 * time.Second):
							late <- i // the client still lacks piece i: send on so the test ends
						}
					}
				}()
				te := pl.start(t, ln.Addr().String())
				resp := pl.get(t, te)
				defer resp.Body.Close()
				for i, w := range tc.want {
					b := make([]byte, len(w))
					if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != w {
						t.Fatalf("piece %d: %q, %v; want %q", i, b, err, w)
					}
					select {
					case i := <-late:
						t.Fatalf("the client received piece %d only after the backend sent the next one", i)
					default:
					}
					got <- struct{}{}
				}
				if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
					t.Fatalf("after the body: %q, %v", rest, err)
				}
				waitFor(t, "in-flight back to 0", func() bool { return inflight(te.pools["s"]) == 0 })
			})
		}
	}
}
