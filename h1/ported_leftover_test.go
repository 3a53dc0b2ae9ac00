//go:build linux

package h1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackendLeftoverBytes is the engine's side of the fasthttp plane's TestSharedBackendBuffers
// (buffers shared across backend connections never carry an earlier connection's bytes): a
// backend that sends more than its response (bytes in the same write behind it, or bytes
// while the connection is idle) never has them read as the answer to a later request; that
// request goes out on a fresh connection. One shard, so that a reuse would have happened.
func TestBackendLeftoverBytes(t *testing.T) {
	const stale = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTALE"
	for _, tc := range []struct {
		name  string
		later bool // the extra bytes come while the connection is idle, not behind the response
	}{
		{"behind the response", false},
		{"while idle", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oneShard(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var conns atomic.Int64
			sentExtra := make(chan struct{})
			firstClosed := make(chan struct{}) // the engine closed the connection that misspoke
			var wg sync.WaitGroup
			t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					n := conns.Add(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer c.Close()
						_ = c.SetDeadline(time.Now().Add(15 * time.Second))
						br := bufio.NewReader(c)
						for i := 0; ; i++ {
							if _, err := http.ReadRequest(br); err != nil {
								if n == 1 {
									close(firstClosed)
								}
								return
							}
							switch {
							case n == 1 && i == 0 && !tc.later:
								_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"+stale)
								close(sentExtra)
							case n == 1 && i == 0:
								_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
								time.Sleep(50 * time.Millisecond) // most often the engine has pooled it by now (else the case above)
								_, _ = io.WriteString(c, stale)
								close(sentExtra)
							case n == 1:
								_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nreused")
							default:
								body := fmt.Sprintf("fresh-%d", n)
								fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
							}
						}
					}()
				}
			}()
			te := startEngine(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
			c := testClient()
			if resp, body := get(t, c, "GET", te.url("/1"), nil, nil); resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("first request: %d %q", resp.StatusCode, body)
			}
			<-sentExtra
			select { // the engine does not keep a connection that spoke out of turn
			case <-firstClosed:
			case <-time.After(10 * time.Second):
				t.Fatal("the engine kept the backend connection that sent bytes beyond its response")
			}
			for i := range 3 {
				resp, body := get(t, c, "GET", te.url(fmt.Sprintf("/%d", i+2)), nil, nil)
				if resp.StatusCode != 200 || string(body) != "fresh-2" {
					t.Fatalf("request %d after the extra bytes: %d %q, want fresh-2 (a new connection, then kept)", i+2, resp.StatusCode, body)
				}
			}
			if n := conns.Load(); n != 2 {
				t.Fatalf("the backend saw %d connections, want 2", n)
			}
		})
	}
}
