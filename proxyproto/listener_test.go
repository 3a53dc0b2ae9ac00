package proxyproto

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func listen(t *testing.T, timeout time.Duration) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := NewListener(ln, timeout)
	t.Cleanup(func() { _ = pl.Close() })
	return pl
}

func dial(t *testing.T, addr net.Addr, send string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestListenerAddrs: a valid header sets the connection's addresses; the bytes after it reach
// the application unchanged; LOCAL and UNKNOWN keep the socket's addresses.
func TestListenerAddrs(t *testing.T) {
	cases := []struct {
		name, send, remote, local string
	}{
		{"v1 tcp4", "PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\nping", "192.0.2.1:12345", "198.51.100.7:443"},
		{"v1 tcp6", "PROXY TCP6 2001:db8::1 2001:db8::2 12345 443\r\nping", "[2001:db8::1]:12345", "[2001:db8::2]:443"},
		{"v2 tcp4", string(v2(0x21, 0x11, v4body...)) + "ping", "192.0.2.1:12345", "198.51.100.7:443"},
		{"v2 tcp6", string(v2(0x21, 0x21, v6body()...)) + "ping", "[2001:db8::1]:12345", "[2001:db8::2]:443"},
		{"v1 unknown", "PROXY UNKNOWN\r\nping", "", ""},
		{"v2 local", string(v2(0x20, 0x00)) + "ping", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln := listen(t, time.Second)
			cc := dial(t, ln.Addr(), c.send)
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			want, wantLocal := c.remote, c.local
			if want == "" {
				want, wantLocal = cc.LocalAddr().String(), cc.RemoteAddr().String()
			}
			if got := sc.RemoteAddr().String(); got != want {
				t.Errorf("RemoteAddr = %s, want %s", got, want)
			}
			if got := sc.LocalAddr().String(); got != wantLocal {
				t.Errorf("LocalAddr = %s, want %s", got, wantLocal)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("stream after header = %q, %v", buf, err)
			}
			if ln.Refused() != 0 {
				t.Fatalf("Refused = %d", ln.Refused())
			}
		})
	}
}

// TestListenerRefuses: a missing, malformed, truncated or late header closes the connection
// (the client reads EOF) and counts it; nothing of the stream reaches the application.
func TestListenerRefuses(t *testing.T) {
	cases := []struct{ name, send string }{
		{"missing", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"malformed v1", "PROXY TCP4 1.2.3.4 nope 1 2\r\n"},
		{"bare LF", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"},
		{"bad v2 version", string(v2(0x11, 0x11, v4body...))},
		{"oversized v1", "PROXY UNKNOWN " + strings.Repeat("z", 200)},
		{"truncated then silent", "PROXY TCP4 1.2.3.4"},
		{"silent", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln := listen(t, 200*time.Millisecond)
			cc := dial(t, ln.Addr(), c.send)
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			if n, err := sc.Read(make([]byte, 64)); err == nil {
				t.Fatalf("Read returned %d bytes and no error", n)
			}
			if ln.Refused() != 1 {
				t.Fatalf("Refused = %d, want 1", ln.Refused())
			}
			_ = cc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := cc.Read(make([]byte, 1)); err == nil {
				t.Fatalf("client read %d bytes from a refused connection", n)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("refused connection was left open")
			}
		})
	}
}

// TestListenerSlowClientDoesNotStallAccept: Accept returns at once for a client that has sent
// nothing, and the next client is served while the first is still silent.
func TestListenerSlowClientDoesNotStallAccept(t *testing.T) {
	ln := listen(t, 10*time.Second)
	dial(t, ln.Addr(), "") // silent
	slow, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	dial(t, ln.Addr(), "PROXY TCP4 192.0.2.9 198.51.100.7 4000 80\r\n")
	done := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err.Error()
			return
		}
		defer c.Close()
		done <- c.RemoteAddr().String()
	}()
	select {
	case got := <-done:
		if got != "192.0.2.9:4000" {
			t.Fatalf("second client: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a silent client stalled the accept loop")
	}
}

// TestListenerFasthttp: an L7 listener over the wrapper sees the client from the header.
func TestListenerFasthttp(t *testing.T) {
	ln := listen(t, time.Second)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.WriteString(ctx.RemoteAddr().String())
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	for _, send := range []string{
		"PROXY TCP4 203.0.113.5 198.51.100.7 55555 80\r\n",
		string(v2(0x21, 0x11, []byte{203, 0, 113, 5, 198, 51, 100, 7, 0xD9, 0x03, 0, 80}...)),
	} {
		c := dial(t, ln.Addr(), send+"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(c)); err != nil {
			t.Fatal(err)
		}
		if got := string(resp.Body()); got != "203.0.113.5:55555" {
			t.Fatalf("fasthttp saw %q, want 203.0.113.5:55555", got)
		}
	}
	c := dial(t, ln.Addr(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("request without header got %d bytes back", n)
	}
	if ln.Refused() != 1 {
		t.Fatalf("Refused = %d, want 1", ln.Refused())
	}
}

// TestListenerKeepsAppDeadline: a read deadline the application set before the first Read
// bounds the header read and still holds after it.
func TestListenerKeepsAppDeadline(t *testing.T) {
	ln := listen(t, 10*time.Second)
	dial(t, ln.Addr(), "PROXY UNKNOWN\r\n") // then silence
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	_, err = sc.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("Read = %v, want the application's timeout", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("application deadline lost: Read returned after %v", el)
	}
	if ln.Refused() != 0 {
		t.Fatalf("Refused = %d", ln.Refused())
	}
}

func TestTrustAllows(t *testing.T) {
	tr := Trust{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, c := range []struct {
		peer string
		want bool
	}{
		{"10.1.2.3", true}, {"::ffff:10.1.2.3", true}, {"11.0.0.1", false},
		{"2001:db8::7", true}, {"2001:db9::7", false}, {"127.0.0.1", false},
	} {
		if got := tr.Allows(netip.MustParseAddr(c.peer)); got != c.want {
			t.Errorf("Allows(%s) = %v, want %v", c.peer, got, c.want)
		}
	}
	var none *Trust
	if !none.Allows(netip.MustParseAddr("192.0.2.1")) || !(&Trust{}).Allows(netip.MustParseAddr("192.0.2.1")) {
		t.Error("an empty trust list must believe every peer")
	}
}
