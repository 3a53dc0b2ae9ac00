//go:build linux

package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// engineOf returns the http plane of s, with its engine (fails the test without one).
func engineOf(t *testing.T, s *Server) *httpPlane {
	t.Helper()
	for _, pl := range s.planes {
		if p, ok := pl.(*httpPlane); ok && p.engine != nil {
			return p
		}
	}
	t.Fatal("the engine was not built")
	return nil
}

// echoUpgradeBackend answers "METHOD PATH n=BODYLEN" and, to an Upgrade request, switches
// protocols and echoes what it gets until the client's end.
func echoUpgradeBackend(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			c, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_, _ = io.Copy(c, brw)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s n=%d", r.Method, r.URL.Path, n)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// dialRaw connects to addr with a deadline.
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readBody reads one response from br and returns its status and body.
func readBody(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a body: %v", err)
	}
	return resp.StatusCode, string(b)
}

// TestH2CListenerHTTP1OnEngine: an h2c listener's HTTP/1.1 connections are served by the
// event-loop engine itself, the bytes it read to tell them from HTTP/2 being their first
// input: keep-alive requests (one with a body), pipelined ones, a chunked body, a first
// request line that arrives in pieces (the sniffing waits for it) and an Upgrade tunnel,
// beside an HTTP/2 request on the same listener. The engine's Stats count every request and
// connection, and what reached the backend is what was sent.
func TestH2CListenerHTTP1OnEngine(t *testing.T) {
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: h2c, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, backends: [{address: %s}]}]
`, echoUpgradeBackend(t)))
	hp := engineOf(t, s)
	addr := s.Addr("h2c").String()
	before := hp.engine.Stats()
	want := func(what string, got, wantStatus int, gotBody, wantBody string) {
		t.Helper()
		if got != wantStatus || gotBody != wantBody {
			t.Errorf("%s: %d %q, want %d %q", what, got, gotBody, wantStatus, wantBody)
		}
	}

	// Keep-alive: two requests in turn on one connection, the second with a body.
	c, br := dialRaw(t, addr)
	io.WriteString(c, "GET /ka1 HTTP/1.1\r\nHost: app.test\r\n\r\n")
	st, b := readBody(t, br)
	want("keep-alive 1", st, 200, b, "GET /ka1 n=0")
	io.WriteString(c, "POST /ka2 HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nhello")
	st, b = readBody(t, br)
	want("keep-alive 2 (a body)", st, 200, b, "POST /ka2 n=5")

	// Pipelined: two requests in one write, answered in order.
	c, br = dialRaw(t, addr)
	io.WriteString(c, "GET /p1 HTTP/1.1\r\nHost: app.test\r\n\r\nGET /p2 HTTP/1.1\r\nHost: app.test\r\n\r\n")
	st, b = readBody(t, br)
	want("pipelined 1", st, 200, b, "GET /p1 n=0")
	st, b = readBody(t, br)
	want("pipelined 2", st, 200, b, "GET /p2 n=0")

	// A chunked body, and a first request line in three writes ("P" could still be the
	// HTTP/2 preface's "PRI").
	c, br = dialRaw(t, addr)
	for _, part := range []string{"P", "UT /chunked HT", "TP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"} {
		io.WriteString(c, part)
		time.Sleep(20 * time.Millisecond)
	}
	st, b = readBody(t, br)
	want("chunked body, split request line", st, 200, b, "PUT /chunked n=7")

	// An Upgrade: the backend's 101, then bytes both ways.
	c, br = dialRaw(t, addr)
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "ping")
	echo := make([]byte, 4)
	if _, err := io.ReadFull(br, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("through the tunnel: %q %v", echo, err)
	}
	if n := hp.engine.Stats().Tunnels - before.Tunnels; n != 1 {
		t.Errorf("the engine has %d tunnels open, want 1", n)
	}
	c.Close()

	// HTTP/2 with prior knowledge on the same listener.
	r, got := body(t, h2cClient(), "http://"+addr+"/h2")
	if r.ProtoMajor != 2 || got != "GET /h2 n=0" {
		t.Errorf("h2c: %s %q", r.Proto, got)
	}

	after := hp.engine.Stats()
	if n := after.Requests - before.Requests; n != 7 { // 6 over HTTP/1.1, 1 stream
		t.Errorf("the engine read %d requests, want 7 (6 HTTP/1.1 and an HTTP/2 stream)", n)
	}
	if n := after.Accepted - before.Accepted; n != 5 {
		t.Errorf("the engine accepted %d connections, want 5", n)
	}
	waitUntil(t, "the tunnel's end", func() bool { return hp.engine.Stats().Tunnels == before.Tunnels })
}

// TestH2CListenerHTTP1ConnsPerClient: an h2c listener's HTTP/1.1 connection counts once
// against max_conns_per_client, on the engine, and gives its place back when it closes: a
// second connection is refused while the first is open (counted in Stats.ConnsRefused), a
// third is served after the first closed.
func TestH2CListenerHTTP1ConnsPerClient(t *testing.T) {
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: h2c, address: "127.0.0.1:0", h2c: true, max_conns_per_client: 1}]
pools: [{name: p, backends: [{address: %s}]}]
`, echoUpgradeBackend(t)))
	hp := engineOf(t, s)
	addr := s.Addr("h2c").String()
	first, br := dialRaw(t, addr)
	for i := range 2 {
		io.WriteString(first, "GET /first HTTP/1.1\r\nHost: app.test\r\n\r\n")
		if st, b := readBody(t, br); st != 200 || b != "GET /first n=0" {
			t.Fatalf("request %d on the first connection: %d %q", i, st, b)
		}
	}
	refused := hp.engine.Stats().ConnsRefused
	second, br2 := dialRaw(t, addr)
	io.WriteString(second, "GET /second HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, err := http.ReadResponse(br2, nil); err == nil {
		t.Fatalf("the second connection was answered %d, want it closed", resp.StatusCode)
	}
	if n := hp.engine.Stats().ConnsRefused - refused; n != 1 {
		t.Errorf("ConnsRefused went up by %d, want 1", n)
	}
	first.Close()
	// The place comes back when the engine sees the close: a new connection is served then.
	served := false
	for end := time.Now().Add(5 * time.Second); !served && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		c, br := dialRaw(t, addr)
		io.WriteString(c, "GET /third HTTP/1.1\r\nHost: app.test\r\n\r\n")
		if resp, err := http.ReadResponse(br, nil); err == nil {
			served = resp.StatusCode == 200
		}
		c.Close()
	}
	if !served {
		t.Error("no connection was served after the first one closed: its place was not given back")
	}
}
