//go:build linux

package h1

import (
	"bytes"
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestIdleMemoryH2 is the engine's analog of h2proxy's TestIdleMemoryReport (which only
// logged what idle HTTP/2 connections cost, when asked to by the environment): 500 idle
// HTTP/2 client connections, each after one request, over h2c and over h2 (TLS, ALPN h2),
// and what the server side keeps per connection, bounded: the live heap allocated under the
// shard's and the handshake's functions after two collections (the in-process client's
// allocations told apart by their stacks, as TestIdleMemoryTLS does), and no goroutine per
// connection. An idle h2mux Conn holds its HPACK tables and no buffer (h2mux's
// TestIdleConnMemory): about 2.5 kB measured, bounded at 4 KiB; over TLS crypto/tls's Conn
// and cipher states come on top: about 9.5 kB, bounded at 14 KiB (a 16 KiB buffer kept per
// connection would pass neither).
func TestIdleMemoryH2(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tls   bool
		bound int64
	}{
		{"h2c", false, 4 << 10},
		{"h2", true, 14 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := runtime.MemProfileRate
			runtime.MemProfileRate = 1
			defer func() { runtime.MemProfileRate = old }()
			cfg := testConfig(testPool("p", "roundrobin", fixedBackend(t)))
			var addr string
			var stats func() Stats
			if tc.tls {
				te := h2TLSEngine(t, cfg)
				addr, stats = te.addr, te.Stats
			} else {
				te, _ := h2cEngine(t, cfg, nil)
				addr, stats = te.addr, te.Stats
			}
			hello := idleH2Hello()
			const n = 500
			runtime.GC()
			goroutines := runtime.NumGoroutine()
			for range n {
				idleH2Open(t, addr, tc.tls, hello)
			}
			waitFor(t, "the connections", func() bool { return stats().Conns == n })
			time.Sleep(100 * time.Millisecond) // the last streams' records go back
			runtime.GC()
			runtime.GC()
			if d := runtime.NumGoroutine() - goroutines; d > 10 {
				t.Errorf("%d goroutines more with %d idle HTTP/2 connections, want none per connection", d, n)
			}
			per := serverHeap(t, "h1.idleH2Open", "TestIdleMemoryH2") / n
			t.Logf("per idle %s connection, server side: %d bytes of live heap", tc.name, per)
			if per > tc.bound {
				t.Fatalf("%d bytes per idle %s connection, want at most %d", per, tc.name, tc.bound)
			}
			if per < 256 {
				t.Fatalf("%d bytes per idle %s connection: the attribution missed the server side", per, tc.name)
			}
		})
	}
}

// idleH2Hello is a client's preface, SETTINGS, its acknowledgement and one GET.
func idleH2Hello() []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var hello bytes.Buffer
	hello.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&hello, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteSettingsAck()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	return hello.Bytes()
}

// idleH2Open opens a connection, sends hello and reads until its stream has ended; the
// connection stays open until the test ends.
func idleH2Open(t *testing.T, addr string, useTLS bool, hello []byte) {
	t.Helper()
	var c net.Conn
	var err error
	if useTLS {
		c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	rd := http2.NewFramer(nil, c)
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
}
