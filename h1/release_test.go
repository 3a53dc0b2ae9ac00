//go:build linux

package h1

import (
	"bufio"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/upstream"
)

// TestSlotReleasedBeforeLastBytes: a response read whole from the backend releases the
// backend's slot before its last bytes are written to the client. Released after the write,
// the slot was still counted while the client, woken by the write, read the response and sent
// its next request: a least-loaded balancer picked for that request with the answering
// backend one busier than it was (issue 24's slow-backend row: bybusyness sent the slow
// backend a sixth request in 7 of 90 traced runs, and a client had its response from the fast
// one before its release in 4.5 % of them; none of either once released first). At the
// release (the pool's OnRelease) the client's socket must not hold the response's last bytes
// yet, and once the client has read them the backend has nothing in flight; for a body whole
// with the head, a body sent after the head, and a close-delimited body (its end: the
// backend closing).
func TestSlotReleasedBeforeLastBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// first is what the backend writes after the request; then, if later is set, the
		// backend waits until the client has read first's response through Ballast (until
		// seen), writes later, and closes when closeAfter.
		first, seen, later string
		closeAfter         bool
		last               string // how the client's response ends
	}{
		{name: "whole", first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", last: "hello"},
		{name: "body later", first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", seen: "\r\n\r\n", later: "hello", last: "hello"},
		{name: "chunked, last chunk later", first: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
			seen: "hello\r\n", later: "0\r\n\r\n", last: "0\r\n\r\n"},
		{name: "close-delimited", first: "HTTP/1.1 200 OK\r\n\r\nhello", seen: "hello\r\n", closeAfter: true, last: "0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			more := make(chan struct{})
			addr := scriptedBackend(t, tc.first, tc.later, tc.closeAfter, more)
			cfg := testConfig(testPool("p", "bybusyness", addr))
			te := startEngine(t, cfg)

			client, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			raw, err := client.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			type atRelease struct {
				queued   int // bytes waiting in the client's socket
				inFlight int64
			}
			released := make(chan atRelease, 4)
			pool, err := upstream.NewPool(cfg.Pools[0].Spec(func(_ *upstream.Pool, b *upstream.Backend, _ time.Duration, _ bool) {
				// The client is not reading now (it waits for this report), so its socket
				// is free to peek at.
				var n int
				buf := make([]byte, 64<<10)
				_ = raw.Read(func(fd uintptr) bool {
					n, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					return true
				})
				released <- atRelease{max(n, 0), b.InFlight()}
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if err := te.Swap(cfg, map[string]*upstream.Pool{"p": pool}); err != nil {
				t.Fatal(err)
			}

			if _, err := io.WriteString(client, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(client)
			var got strings.Builder
			if tc.seen != "" {
				readUntil(t, br, &got, tc.seen)
				close(more)
			}
			var r atRelease
			select {
			case r = <-released:
			case <-time.After(10 * time.Second):
				t.Fatalf("no release after 10 s; the client has %q", got.String())
			}
			if r.queued != 0 {
				t.Errorf("at the release the client could read %d bytes of the response's end already", r.queued)
			}
			if r.inFlight != 0 {
				t.Errorf("at the release the backend has %d in flight, want 0", r.inFlight)
			}
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			got.Write(rest)
			if !strings.HasSuffix(got.String(), tc.last) || !strings.HasPrefix(got.String(), "HTTP/1.1 200 ") {
				t.Fatalf("response %q, want a 200 ending in %q", got.String(), tc.last)
			}
			if n := pool.Backends()[0].InFlight(); n != 0 {
				t.Errorf("the client has the whole response and the backend %d in flight, want 0", n)
			}
			if len(released) != 0 {
				t.Errorf("%d more releases for one request", len(released))
			}
		})
	}
}

// scriptedBackend answers one connection: it reads the request head, writes first, and, if
// later is set or closeAfter, waits for more to close, then writes later and, when
// closeAfter, closes. Otherwise it holds the connection until the test ends.
func scriptedBackend(t *testing.T, first, later string, closeAfter bool, more <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		if _, err := io.WriteString(c, first); err != nil {
			return
		}
		if later != "" || closeAfter {
			select {
			case <-more:
			case <-stop:
				return
			}
			if _, err := io.WriteString(c, later); err != nil || closeAfter {
				return
			}
		}
		<-stop
	}()
	return ln.Addr().String()
}

// readUntil reads from br into got until got ends with suffix.
func readUntil(t *testing.T, br *bufio.Reader, got *strings.Builder, suffix string) {
	t.Helper()
	for !strings.HasSuffix(got.String(), suffix) {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("reading the response: %v after %q", err, got.String())
		}
		got.WriteByte(b)
	}
}
