//go:build linux

package sockio

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRelayListener: a relay shard accepts the listener's connections itself (TCP_NODELAY
// inherited, the peer's address given) and the pair forwarded with that shard works; after
// Close nothing more is accepted.
func TestRelayListener(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	backend, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	accepted := make(chan netip.AddrPort, 4)
	rl, err := testRelay().Listen(ln, func(fd int, peer netip.AddrPort, shard RelayShard) {
		if v, err := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); err != nil || v == 0 {
			t.Errorf("TCP_NODELAY = %d, %v", v, err)
		}
		bfd, err := Dial(backend.Addr().(*net.TCPAddr).AddrPort(), time.Second)
		if err != nil {
			t.Error(err)
			Close(fd)
			return
		}
		accepted <- peer
		testRelay().Forward(RelayFlow{A: fd, B: bfd, Shard: shard, Done: func(bool) {}})
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "ping")
	if got := readN(t, c, 4); got != "ping" {
		t.Fatalf("echo %q", got)
	}
	if peer := <-accepted; peer != c.LocalAddr().(*net.TCPAddr).AddrPort() {
		t.Fatalf("peer %v, want %v", peer, c.LocalAddr())
	}
	rl.Close()
	select {
	case <-rl.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	c2, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr)) // lands in the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case p := <-accepted:
		t.Fatalf("accepted %v after Close", p)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestRelayListenerSet: at light load one shard (the listener's home) accepts every
// connection; a backlog that fills a batch adds shards to the listener's set, which then share
// the accepts; a second without a full batch takes the set back to the home shard. Every
// connection is accepted exactly once throughout.
func TestRelayListenerSet(t *testing.T) {
	r := newRelay(3)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	by := map[RelayShard]int{} // accepts by shard
	total := 0
	var slow atomic.Bool // the burst: each accept takes a while, as in a busy shard
	rl, err := r.Listen(ln, func(fd int, _ netip.AddrPort, shard RelayShard) {
		if slow.Load() {
			time.Sleep(2 * time.Millisecond)
		}
		Close(fd)
		mu.Lock()
		by[shard]++
		total++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	counts := func() (map[RelayShard]int, int) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(by), total
	}
	waitTotal := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, got := counts(); got == n {
				return
			} else if got > n || time.Now().After(deadline) {
				t.Fatalf("%d connections accepted, want %d", got, n)
			}
		}
	}
	dial := func() {
		t.Helper()
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	sent := 0
	oneByOne := func(n int) {
		t.Helper()
		for range n {
			dial()
			sent++
			waitTotal(sent)
		}
	}

	oneByOne(40)
	if got, _ := counts(); len(got) != 1 || rl.Shards() != 1 {
		t.Fatalf("light load: accepted by %v, listener in %d sets; want one shard", got, rl.Shards())
	}
	var home RelayShard
	for sh := range by {
		home = sh
	}

	slow.Store(true)
	const burst = 400
	for range burst { // into the backlog faster than 2 ms each are accepted
		dial()
	}
	sent += burst
	waitTotal(sent)
	slow.Store(false)
	got, _ := counts()
	if len(got) < 2 || rl.Shards() < 2 {
		t.Fatalf("burst: accepted by %v, listener in %d sets; want more than one shard", got, rl.Shards())
	}

	// Light load again: the home shard takes the set back a second after the last full batch.
	for deadline := time.Now().Add(10 * time.Second); rl.Shards() > 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("listener still in %d sets", rl.Shards())
		}
		oneByOne(1)
	}
	before, _ := counts()
	oneByOne(40)
	after, _ := counts()
	if n := after[home] - before[home]; n != 40 {
		t.Fatalf("after the burst, the home shard accepted %d of 40 (%v → %v)", n, before, after)
	}
}

// TestRelayListenerBacklog: connections that wait in the accept queue together are all
// accepted though nothing follows them. The listening socket is level-triggered in the shard's
// set, which raises no new edge in the runtime's poller while connections remain after an
// accept: a shard that parked then would leave them waiting. Each burst's first accept takes
// a while, so that the rest of the burst is queued behind it by then; the accepted
// connections are closed at once and cause no later events.
func TestRelayListenerBacklog(t *testing.T) {
	r := newRelay(1)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	var slow atomic.Bool
	rl, err := r.Listen(ln, func(fd int, _ netip.AddrPort, _ RelayShard) {
		if slow.Swap(false) {
			time.Sleep(20 * time.Millisecond)
		}
		Close(fd)
		accepted.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	total := 0
	for b := range 20 {
		n := 2 + b%8
		slow.Store(true)
		for range n {
			c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		total += n
		for deadline := time.Now().Add(2 * time.Second); accepted.Load() < int64(total); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: %d of %d connections accepted", b, accepted.Load(), total)
			}
		}
	}
	if a := accepted.Load(); a != int64(total) {
		t.Fatalf("accepted %d connections, want %d", a, total)
	}
}

// TestRelayListenerBursts: one shard accepts and relays bursts of short connections, each
// burst followed by silence, so that an event of a pair left unserved when a batch ends (the
// shard parks without looking again: events after its last look raise a new edge) has nothing
// after it to wake the shard, and its exchange times out. Every connection is echoed whole and ends (FIN both ways) within the
// deadline, accepted exactly once.
func TestRelayListenerBursts(t *testing.T) {
	r := newRelay(1)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	backend, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.(*net.TCPConn).CloseWrite(); io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	var accepted, ended atomic.Int64
	bap := backend.Addr().(*net.TCPAddr).AddrPort()
	rl, err := r.Listen(ln, func(fd int, _ netip.AddrPort, shard RelayShard) {
		accepted.Add(1)
		bfd, err := Dial(bap, time.Second)
		if err != nil {
			t.Error(err)
			Close(fd)
			return
		}
		r.Forward(RelayFlow{A: fd, B: bfd, Shard: shard, Done: func(bool) { ended.Add(1) }})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	const bursts, width = 60, 12
	total := 0
	for b := range bursts {
		n := 1 + b%width // 1 to 12 at once
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				msg := fmt.Sprintf("burst %d conn %d", b, i)
				if _, err := io.WriteString(c, msg); err != nil {
					errs <- err
					return
				}
				if i%2 == 0 {
					_ = c.CloseWrite() // half of them end their side before the answer
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
					errs <- fmt.Errorf("burst %d conn %d: echo %q, %v", b, i, got, err)
					return
				}
				_ = c.CloseWrite()
				if _, err := c.Read(got); err != io.EOF {
					errs <- fmt.Errorf("burst %d conn %d: %v after the echo, want EOF", b, i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total += n
		for deadline := time.Now().Add(5 * time.Second); ended.Load() < int64(total); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("burst %d: %d of %d pairs ended", b, ended.Load(), total)
			}
		}
	}
	if a := accepted.Load(); a != int64(total) {
		t.Fatalf("accepted %d connections, want %d", a, total)
	}
}
