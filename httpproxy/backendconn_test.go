//go:build linux

package httpproxy

import (
	"ballast/internal/peertest"
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestWriteAndWait(t *testing.T) {
	tests := []struct {
		name    string
		peer    func(br *bufio.Reader, c net.Conn) // runs after reading the request line
		timeout bool                               // writeAndWait must fail with a timeout
		read    string                             // what Read returns after writeAndWait, when no error; "" = io.EOF
	}{
		{"response follows", func(_ *bufio.Reader, c net.Conn) { _, _ = c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n")) }, false, "HTTP/1.1 204"},
		{"peer closes", func(_ *bufio.Reader, c net.Conn) { _ = c.Close() }, false, ""},
		{"no answer before the deadline", func(*bufio.Reader, net.Conn) {}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, s := peertest.TCPPair(t)
			dc := newDeadlineConn(c)
			if dc.raw.RC == nil {
				t.Fatal("no raw conn for a TCP connection")
			}
			go func() {
				br := bufio.NewReader(s)
				if line, err := br.ReadString('\n'); err == nil && strings.HasPrefix(line, "GET /x HTTP/1.1") {
					tc.peer(br, s)
				}
			}()
			_ = dc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			var req fasthttp.Request
			req.SetRequestURI("http://backend/x")
			bw := bufio.NewWriter(dc)
			err := dc.writeAndWait(&req, bw)
			if tc.timeout {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("writeAndWait = %v, want a timeout", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("writeAndWait = %v", err)
			}
			buf := make([]byte, 64)
			n, err := dc.Read(buf)
			switch {
			case tc.read == "" && err != io.EOF:
				t.Fatalf("read = %q, %v; want io.EOF", buf[:n], err)
			case tc.read != "" && !strings.HasPrefix(string(buf[:n]), tc.read):
				t.Fatalf("read = %q, %v; want prefix %q", buf[:n], err, tc.read)
			}
		})
	}
}

// TestHTTP10KeepsBackendConnection: an HTTP/1.0 request with a Host goes to the backend as
// HTTP/1.1, so the backend keeps its connection, as for an HTTP/1.1 client that closes.
// (An HTTP/1.0 request without a Host cannot be forwarded: fasthttp refuses to write it.)
func TestHTTP10KeepsBackendConnection(t *testing.T) {
	tests := []struct {
		name      string
		request   string
		wantProto string
		wantConns func(int64) bool
	}{
		{"with host", "GET /a HTTP/1.0\r\nHost: example.test\r\n\r\n", "HTTP/1.1", func(n int64) bool { return n == 1 }},
		{"HTTP/1.1 closing client", "GET /a HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n", "HTTP/1.1", func(n int64) bool { return n == 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			var mu sync.Mutex
			var protos []string
			be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				protos = append(protos, r.Proto)
				mu.Unlock()
				_, _ = io.WriteString(w, "hello")
			}))
			be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			be.Start()
			t.Cleanup(be.Close)
			tp := startProxy(t, testConfig(testPool("p", "roundrobin", be.Listener.Addr().String())))
			for i := range 3 {
				c, err := net.Dial("tcp", tp.addr)
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, tc.request); err != nil {
					t.Fatal(err)
				}
				resp, err := io.ReadAll(c) // HTTP/1.0 without keep-alive: the proxy closes
				_ = c.Close()
				if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.1 200") || !strings.HasSuffix(string(resp), "hello") {
					t.Fatalf("request %d: %q, %v", i, resp, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range protos {
				if p != tc.wantProto {
					t.Fatalf("backend saw %v, want all %s", protos, tc.wantProto)
				}
			}
			if n := conns.Load(); !tc.wantConns(n) {
				t.Fatalf("backend accepted %d connections for 3 requests", n)
			}
		})
	}
}

// TestHalfClosedIdleBackend: a backend that half-closes an idle keep-alive connection and
// lingers reading (as Apache does) must not make the next request wait for the response
// timeout: the reused connection is found closed and the request goes out on a fresh one.
func TestHalfClosedIdleBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	halfClosed := make(chan struct{}, 4)
	var conns atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	go func() {
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
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				var req fasthttp.Request
				if err := req.Read(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if n == 1 {
					_ = c.(*net.TCPConn).CloseWrite() // idle "timeout": FIN, then linger
					halfClosed <- struct{}{}
					_, _ = io.Copy(io.Discard, c) // discard whatever comes, never answer
				}
			}()
		}
	}()
	pc := testPool("p", "roundrobin", ln.Addr().String())
	pc.Timeouts.Response = dur(15 * time.Second)
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	for i := range 2 {
		if i == 1 {
			<-halfClosed
			time.Sleep(quickReuse + 50*time.Millisecond) // idle long enough to count as idle
		}
		resp, body := get(t, c, "GET", tp.url("/"), nil, nil)
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("backend saw %d connections, want 2 (the half-closed one replaced)", n)
	}
}
