package httpproxy

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/config"
)

// TestClientGoneCancelsTheAttempt: a client that closes its connection while the backend
// thinks is noticed within watchSlice: the backend connection is closed, the backend's slot
// is free again at once (not after the backend's answer or the response timeout) and the
// access log says 499 with termination CH.
func TestClientGoneCancelsTheAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		_, _ = c.Read(buf) // the request; no answer
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = c.Read(buf) // returns when the proxy closes the connection
		closed <- time.Now()
	}()
	cfg := testConfig(testPool("p", "roundrobin", ln.Addr().String()))
	cfg.Logging.Access, cfg.Logging.AccessFormat = true, config.AccessJSON
	cfg.Logging.AccessFile = filepath.Join(t.TempDir(), "access.log")
	tp := startProxy(t, cfg)
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request in flight", func() bool { return inflight(tp.pools["p"]) == 1 })
	left := time.Now()
	c.Close()
	select {
	case at := <-closed:
		if d := at.Sub(left); d > 10*time.Second { // a bound, well below the pool's 20 s response timeout
			t.Errorf("the backend connection closed %v after the client left", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the backend connection stayed open after the client left")
	}
	waitFor(t, "the slot freed", func() bool { return inflight(tp.pools["p"]) == 0 })
	line := readLog(t, cfg.Logging.AccessFile, 1)[0]
	for _, want := range []string{`"status":499`, `"termination":"CH"`, `"uri":"/slow"`} {
		if !strings.Contains(line, want) {
			t.Errorf("access line %s lacks %s", line, want)
		}
	}
	if data, _ := os.ReadFile(cfg.Logging.AccessFile); strings.Count(string(data), "\n") != 1 {
		t.Errorf("%d access lines, want 1", strings.Count(string(data), "\n"))
	}
}

// TestHeadAcrossTheWatchSlice: a backend that sends the first line of its response at once and
// the rest of the head only after the watch slice's deadline (which bounds the wait while the
// client is watched) is still answered within timeouts.response: the head is read again.
func TestHeadAcrossTheWatchSlice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nX-Part: 1\r\n"))
				time.Sleep(2*watchSlice + watchSlice/2) // past the first wait's deadline, at most 2 slices
				_, _ = c.Write([]byte("Content-Length: 4\r\n\r\nslow"))
			}()
		}
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	resp, body := rawDo(t, tp.addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 200 || body != "slow" || resp.Header.Get("X-Part") != "1" {
		t.Fatalf("%d %q %v, want 200 slow", resp.StatusCode, body, resp.Header)
	}
}
