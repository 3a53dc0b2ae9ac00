package httpproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestTunnelHalfCloseAndEarlyBytes: after a 101 the tunnel passes on the bytes the backend sent
// right behind its answer, then copies both ways with half-close: the client's FIN reaches the
// backend, which still answers, and the client reads that answer before the end of stream.
func TestTunnelHalfCloseAndEarlyBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// The 101 and the first bytes of the new protocol in one write.
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\nearly;")
		rest, _ := io.ReadAll(br) // up to the client's FIN, passed on as a half-close
		got <- string(rest)
		_, _ = io.WriteString(c, "echo:"+string(rest)+";bye")
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading after the half-close: %v", err)
	}
	if want := "early;echo:hello;bye"; string(rest) != want {
		t.Fatalf("client read %q, want %q", rest, want)
	}
	select {
	case s := <-got:
		if s != "hello" {
			t.Fatalf("backend read %q, want exactly hello", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend never saw the client's end of stream")
	}
}

// TestTunnelBackendFinReachesClient: the backend ends its direction first; the client sees the
// end of stream at once (a half-close through the hijacked connection) and can still send.
func TestTunnelBackendFinReachesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\nserver-done")
		_ = c.(*net.TCPConn).CloseWrite()
		rest, _ := io.ReadAll(br)
		got <- string(rest)
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	rest, err := io.ReadAll(br) // ends at the backend's FIN, while the client's side is open
	if err != nil || string(rest) != "server-done" {
		t.Fatalf("client read %q, %v", rest, err)
	}
	if _, err := io.WriteString(c, "client-late"); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case s := <-got:
		if s != "client-late" {
			t.Fatalf("backend read %q after its own FIN, want client-late", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend never saw the client's bytes and end of stream")
	}
}
