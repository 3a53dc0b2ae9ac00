//go:build linux

package h1

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

// TestIdleMemory parks 2000 keep-alive connections after one request each and bounds what
// they cost the process (heap and stacks after two collections, the test's client side
// included): an idle connection holds its record and no buffer or goroutine of the engine's.
// BALLAST_IDLE_HEAP=FILE writes the heap profile.
func TestIdleMemory(t *testing.T) {
	te := startEngine(t, testConfig(testPool("p", "roundrobin", fixedBackend(t))))
	const n = 2000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The client side alone, for the difference: n connections to a listener that accepts
	// them and holds them, without the engine.
	base := measureHeap()
	buf := make([]byte, 4096)
	for range n {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the connections", func() bool { return te.Stats().Conns == n })
	after := measureHeap()
	per := (after - base) / n
	t.Logf("per idle connection, client side included: %d bytes of heap and stacks", per)
	if f := os.Getenv("BALLAST_IDLE_HEAP"); f != "" {
		out, _ := os.Create(f)
		_ = pprof.WriteHeapProfile(out)
		out.Close()
	}
	if per > 1536 {
		t.Fatalf("%d bytes per idle connection (client side included), want at most 1536", per)
	}
}

func measureHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}
