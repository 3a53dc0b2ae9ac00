package l4

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/upstream"
)

// TestTCPShortFloodBeside64MiB: bursts of short connections (64 dialled at once, so that the
// listener's backlog fills and more relay shards join the accepts; half send their request and
// their FIN together) through a pool with max_conns 8 per backend, while 64 MiB go each way on
// another connection. Every short connection gets its echo and its end, no backend ever holds
// more than 8 connections (the pool's count, sampled as each arrives), and the counters add up: accepted, normal terminations, connections
// and bytes per backend; the process's sockets return to where they were (pipes are left out:
// the echo backends' splices keep theirs in Go's pool).
func TestTCPShortFloodBeside64MiB(t *testing.T) {
	const maxConns = 8
	// Each backend samples the pool's count of its connections as each one arrives: the bound
	// is the pool's (a backend's own count lags behind the proxy's releases).
	var pool atomic.Pointer[upstream.Pool]
	var peak [2]atomic.Int64
	counting := func(i int) func(*net.TCPConn) {
		return func(c *net.TCPConn) {
			n := pool.Load().Backends()[i].InFlight()
			for {
				p := peak[i].Load()
				if n <= p || peak[i].CompareAndSwap(p, n) {
					break
				}
			}
			echo(c)
		}
	}
	pool.Store(newPool(t, "p", "leastconn", maxConns, 4096, tcpServer(t, counting(0)), tcpServer(t, counting(1))))
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: pool.Load()})
	warm := dialTCP(t, addr)
	io.WriteString(warm, "w")
	io.ReadFull(warm, make([]byte, 1))
	warm.Close()
	eventually(t, 5*time.Second, "warm-up connection ended", func() bool { return p.Stats().Active == 0 })
	before := fdKinds(t)["socket"]

	// 64 MiB each way, checked end to end.
	bulk := make([]byte, 64<<20)
	_, _ = rand.Read(bulk)
	bulkErr := make(chan error, 1)
	go func() {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			bulkErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		werr := make(chan error, 1)
		go func() {
			_, err := c.Write(bulk)
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			werr <- err
		}()
		got, err := io.ReadAll(c)
		if err == nil {
			err = <-werr
		}
		if err == nil && sha256.Sum256(got) != sha256.Sum256(bulk) {
			err = io.ErrShortBuffer
			t.Errorf("64 MiB echo differs: %d bytes back", len(got))
		}
		bulkErr <- err
	}()

	const workers, rounds = 64, 20
	msg := bytes.Repeat([]byte("x"), 100)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for round := range rounds {
		start := make(chan struct{})
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					failed.Add(1)
					t.Error(err)
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				_, err = c.Write(msg)
				if err == nil && (w+round)%2 == 0 {
					err = c.(*net.TCPConn).CloseWrite() // the request and its end together
				}
				got := make([]byte, len(msg))
				if err == nil {
					_, err = io.ReadFull(c, got)
				}
				if err == nil && (w+round)%2 == 0 {
					var n int
					if n, err = c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
						t.Errorf("after the echo: %d bytes, %v; want the end", n, err)
					}
					err = nil
				}
				if err != nil || !bytes.Equal(got, msg) {
					failed.Add(1)
					t.Errorf("short connection: %v, echo %q", err, got[:min(len(got), 8)])
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	if err := <-bulkErr; err != nil {
		t.Fatal(err)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d short connections failed", failed.Load())
	}
	eventually(t, 20*time.Second, "all connections ended", func() bool { return p.Stats().Active == 0 && pool.Load().InFlight() == 0 })
	const short = workers * rounds
	st := p.Stats()
	if st.Accepted != short+2 || st.Terminations["--"] != short+2 {
		t.Fatalf("accepted %d, normal ends %d (%v); want %d", st.Accepted, st.Terminations["--"], st.Terminations, short+2)
	}
	var conns, in, out uint64
	for i, b := range pool.Load().Backends() {
		bs := p.BackendStats(b)
		conns, in, out = conns+bs.Conns, in+bs.BytesIn, out+bs.BytesOut
		if pk := peak[i].Load(); pk > maxConns {
			t.Errorf("backend %d had %d connections at once, max_conns %d", i, pk, maxConns)
		}
	}
	want := uint64(short*len(msg) + len(bulk) + 1)
	if conns != short+2 || in != want || out != want {
		t.Fatalf("backends: %d connections, %d bytes in, %d out; want %d and %d", conns, in, out, short+2, want)
	}
	deadline := time.Now().Add(20 * time.Second)
	for fdKinds(t)["socket"] > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets open, %d before (all descriptors: %v)", fdKinds(t)["socket"], before, fdKinds(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fdKinds counts the process's open descriptors by what they are (socket, pipe...).
func fdKinds(t *testing.T) map[string]int {
	t.Helper()
	es, _ := os.ReadDir("/proc/self/fd")
	kinds := map[string]int{}
	for _, e := range es {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if i := strings.IndexByte(l, ':'); i > 0 {
			l = l[:i]
		}
		kinds[l]++
	}
	return kinds
}
