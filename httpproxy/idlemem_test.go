package httpproxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"ballast/sockio"
)

// TestIdleMemoryReport measures what N idle keep-alive client connections cost the process
// (Go heap and goroutine stacks, after garbage collection) when BALLAST_IDLE_CONNS=N is set;
// BALLAST_IDLE_HEAP=FILE also writes the heap profile. It is how docs/performance.md splits the
// memory of an idle connection; the RSS figure comes from tools/peers/idle.sh.
//
//	BALLAST_IDLE_CONNS=3000 go test -run TestIdleMemoryReport -v ./httpproxy
func TestIdleMemoryReport(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BALLAST_IDLE_CONNS"))
	if n <= 0 {
		t.Skip("BALLAST_IDLE_CONNS not set")
	}
	be := smallBackend(t)
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", be)))
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 4096)
	get := func(c net.Conn) {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := c.Read(buf); err != nil || n < 12 || string(buf[:12]) != "HTTP/1.1 200" {
			t.Fatalf("answer %q, %v", buf[:n], err)
		}
	}
	warm, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	get(warm)
	answer(warm)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		get(c)
	}
	for _, c := range conns {
		answer(c)
	}
	waitFor(t, "all connections parked", func() bool { return parkedConns(tp) >= n })
	// Two collections: buffers the parked connections gave back sit in sync.Pools until then.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	t.Logf("per idle connection (client side included): heap %.0f B, stacks %.0f B; goroutines %d",
		per(before.HeapAlloc, after.HeapAlloc), per(before.StackInuse, after.StackInuse), runtime.NumGoroutine())
	if p := os.Getenv("BALLAST_IDLE_HEAP"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// smallBackend answers every request with a 42-byte body, in one write.
func smallBackend(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 42\r\n\r\n" +
		"<html><body><h1>It works!</h1></body></htm"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					for { // a head without a body: lines up to the blank one
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkKeepConnIdleWait is what parking adds to every keep-alive request: the handler's
// mark, the idle deadline (capped at parkAfter) and a read that finds the next request,
// beside the same read on the bare sockio.Conn.
func BenchmarkKeepConnIdleWait(b *testing.B) {
	for _, park := range []bool{false, true} {
		name := map[bool]string{false: "sockio.Conn", true: "keepConn"}[park]
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			peer, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer peer.Close()
			s, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			c := sockio.NewConn(s)
			defer c.Close()
			k, ok := parkListener{}.wrap(c)
			if !ok {
				b.Skip("no raw socket here")
			}
			msg := []byte("GET / HTTP/1.1\r\n\r\n")
			buf := make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := peer.Write(msg); err != nil {
					b.Fatal(err)
				}
				if park {
					k.state.Store(kcDone)
					_ = k.SetReadDeadline(time.Now().Add(time.Minute))
					_, err = io.ReadFull(k, buf[:len(msg)])
					_ = k.SetReadDeadline(time.Now().Add(10 * time.Second)) // fasthttp's header timeout
				} else {
					_ = c.SetReadDeadline(time.Now().Add(time.Minute))
					_, err = io.ReadFull(c, buf[:len(msg)])
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
