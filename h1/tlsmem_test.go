//go:build linux

package h1

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIdleMemoryTLS holds 500 idle keep-alive TLS connections after one request each and
// reports what the server side keeps per connection: the live heap allocated under the
// handshake's and the shard's functions (the in-process client's allocations are told apart
// by their stacks), after two collections. It bounds it at 12 KiB (crypto/tls's Conn, its
// cipher states and record buffer; no goroutine, no write buffer).
func TestIdleMemoryTLS(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	te := startTLSEngine(t, testConfig(testPool("p", "roundrobin", fixedBackend(t))))
	const n = 500
	buf := make([]byte, 4096)
	for range n {
		c := dialTLS(t, te.addr, "http/1.1")
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the connections", func() bool { return te.Stats().Conns == n })
	runtime.GC()
	runtime.GC()
	per := serverHeap(t, "h1.dialTLS", "TestIdleMemoryTLS") / n
	t.Logf("per idle TLS connection, server side: %d bytes of live heap", per)
	if per > 12<<10 {
		t.Fatalf("%d bytes per idle TLS connection, want at most 12 KiB", per)
	}
	if per < 512 {
		t.Fatalf("%d bytes per idle TLS connection: the attribution missed the server side", per)
	}
}

// serverHeap is the live heap (MemProfileRate 1) allocated under the engine's shards and TLS
// handshakes, not under the client's functions (any function whose name holds one of client:
// a stack is the first side it meets, innermost first).
func serverHeap(t *testing.T, client ...string) int64 {
	t.Helper()
	var recs []runtime.MemProfileRecord
	for {
		k, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:k]
			break
		}
		recs = make([]runtime.MemProfileRecord, k+64)
	}
	var server int64
	for _, r := range recs {
		if r.InUseBytes() == 0 {
			continue
		}
		frames := runtime.CallersFrames(r.Stack())
		side := ""
		for side == "" {
			f, more := frames.Next()
			switch {
			case strings.Contains(f.Function, "tlsconn.Handshake"), strings.Contains(f.Function, "h1.(*tlsAttach)"),
				strings.Contains(f.Function, "evloop.(*Shard)"):
				side = "server"
			case slices.ContainsFunc(client, func(c string) bool { return strings.Contains(f.Function, c) }):
				side = "client"
			}
			if !more {
				break
			}
		}
		if side == "server" {
			server += r.InUseBytes()
		}
	}
	return server
}
