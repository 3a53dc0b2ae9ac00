//go:build linux

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// testRelay is shared like the L4 proxy's: a Relay's shards live as long as the process.
var testRelay = sync.OnceValue(NewRelay)

// relayed is a client ↔ relay ↔ backend chain over loopback sockets; a and b are the relay's
// ends.
type relayed struct {
	client, backend *net.TCPConn
	a, b            int // the relay's descriptors: a accepted by Accept, b connected by Dial
	ab, ba          atomic.Uint64
	done            chan bool // Done's idled
	res             *RelayResult
}

func relay(t *testing.T, idle time.Duration) *relayed {
	t.Helper()
	return relayWith(t, idle, func(*relayed) {})
}

// relayWith lets setup adjust the sockets before the relay takes them.
func relayWith(t *testing.T, idle time.Duration, setup func(*relayed)) *relayed {
	t.Helper()
	return relayPrefix(t, idle, nil, setup)
}

func relayPrefix(t *testing.T, idle time.Duration, prefix []byte, setup func(*relayed)) *relayed {
	t.Helper()
	x := &relayed{done: make(chan bool, 1)}
	x.client, x.a = acceptedPair(t)
	x.backend, x.b = dialedPair(t)
	setup(x)
	testRelay().Forward(RelayFlow{A: x.a, B: x.b, Prefix: prefix, Idle: idle, AB: &x.ab, BA: &x.ba,
		Done: func(idled bool) { x.done <- idled }})
	return x
}

// acceptedPair connects a client to a loopback listener whose end Accept takes as a bare
// descriptor, left to the relay: only the client is closed when the test ends.
func acceptedPair(t *testing.T) (peer *net.TCPConn, own int) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	a, err := NewAcceptor(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	own = -1
	if err := a.Accept(1, func(fd int, _ netip.AddrPort) { own = fd }); err != nil || own < 0 {
		t.Fatalf("Accept: %v (fd %d)", err, own)
	}
	return peer, own
}

// dialedPair is a descriptor connected by Dial to a loopback listener, and the listener's end.
func dialedPair(t *testing.T) (peer *net.TCPConn, own int) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	own, err = Dial(ln.Addr().(*net.TCPAddr).AddrPort(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if peer, err = ln.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	return peer, own
}

func (x *relayed) wait(t *testing.T) bool {
	t.Helper()
	select {
	case idled := <-x.done:
		return idled
	case <-time.After(10 * time.Second):
		t.Fatal("the pair did not end")
		return false
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return string(buf)
}

func readEOF(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("want EOF, got %d bytes, %v", n, err)
	}
}

// TestRelayHalfClose: short exchanges both ways, then either side's FIN is passed on while the
// other direction keeps flowing; the pair ends when both have ended, and every byte is counted.
func TestRelayHalfClose(t *testing.T) {
	for _, clientFirst := range []bool{true, false} {
		x := relay(t, time.Minute)
		x.client.Write([]byte("ping"))
		if got := readN(t, x.backend, 4); got != "ping" {
			t.Fatalf("backend got %q", got)
		}
		x.backend.Write([]byte("pong!"))
		if got := readN(t, x.client, 5); got != "pong!" {
			t.Fatalf("client got %q", got)
		}
		first, second := x.client, x.backend
		if !clientFirst {
			first, second = second, first
		}
		first.CloseWrite()
		readEOF(t, second)
		second.Write([]byte("after")) // the other direction still flows
		if got := readN(t, first, 5); got != "after" {
			t.Fatalf("clientFirst=%v: after the half-close got %q", clientFirst, got)
		}
		select {
		case <-x.done:
			t.Fatalf("clientFirst=%v: ended with one direction open", clientFirst)
		default:
		}
		second.CloseWrite()
		readEOF(t, first)
		if x.wait(t) {
			t.Fatal("reported idle")
		}
		wantAB, wantBA := uint64(4), uint64(5)
		if clientFirst {
			wantBA += 5
		} else {
			wantAB += 5
		}
		if x.ab.Load() != wantAB || x.ba.Load() != wantBA {
			t.Fatalf("clientFirst=%v: counted %d/%d, want %d/%d", clientFirst, x.ab.Load(), x.ba.Load(), wantAB, wantBA)
		}
	}
}

// TestRelayPrefix: the prefix reaches the backend before the client's bytes and is not
// counted; a prefix larger than the backend's socket takes at once goes through Pipe.
func TestRelayPrefix(t *testing.T) {
	for _, size := range []int{5, 8 << 20} {
		prefix := pattern(size)
		x := relayPrefix(t, time.Minute, prefix, func(*relayed) {})
		x.client.Write([]byte("after"))
		x.client.CloseWrite()
		_ = x.backend.SetReadDeadline(time.Now().Add(20 * time.Second))
		got, err := io.ReadAll(x.backend)
		if want := append(append([]byte(nil), prefix...), "after"...); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("prefix %d: backend got %d bytes (%v), want %d: the prefix, then the client's", size, len(got), err, len(want))
		}
		x.backend.CloseWrite()
		readEOF(t, x.client)
		x.wait(t)
		if x.ab.Load() != 5 {
			t.Fatalf("prefix %d: counted %d client bytes, want 5", size, x.ab.Load())
		}
	}
}

// handedOver counts the pairs the test relay gave to Pipe's goroutines.
func handedOver() uint64 {
	var n uint64
	for _, s := range testRelay().shards {
		n += s.handedOver.Load()
	}
	return n
}

// TestRelayKeepsMediumResponses: a 40 KiB response, more than one buffer but within a burst's
// reads, moves in the shard (no hand-over), whole and in order.
func TestRelayKeepsMediumResponses(t *testing.T) {
	x := relay(t, time.Minute)
	before := handedOver()
	data := pattern(40 << 10)
	if _, err := x.backend.Write(data); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, x.client, len(data)); got != string(data) {
		t.Fatal("the client got other bytes than the backend sent")
	}
	if n := handedOver() - before; n != 0 {
		t.Fatalf("%d pairs handed over to Pipe for a 40 KiB response", n)
	}
	x.client.CloseWrite()
	x.backend.CloseWrite()
	x.wait(t)
}

// TestRelayHandsOverBulk: a burst larger than the buffer goes on through Pipe's goroutines
// (splice) with nothing lost or reordered, and the half-close still passes afterwards.
func TestRelayHandsOverBulk(t *testing.T) {
	x := relay(t, time.Minute)
	before := handedOver()
	defer func() {
		if handedOver() == before {
			t.Error("a 3 MiB transfer stayed in the shard")
		}
	}()
	data := pattern(3<<20 + 7)
	go func() {
		x.client.Write(data)
		x.client.CloseWrite()
	}()
	_ = x.backend.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(x.backend)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backend got %d bytes (%v), want the %d sent, in order", len(got), err, len(data))
	}
	x.backend.Write([]byte("ok"))
	x.backend.CloseWrite()
	if got := readN(t, x.client, 2); got != "ok" {
		t.Fatalf("client got %q", got)
	}
	readEOF(t, x.client)
	x.wait(t)
	if x.ab.Load() != uint64(len(data)) || x.ba.Load() != 2 {
		t.Fatalf("counted %d/%d", x.ab.Load(), x.ba.Load())
	}
}

// TestRelaySlowReceiver: a receiver that does not read makes the relay's write fall short;
// the bytes it did not take are handed over with the pair and arrive first, in order.
func TestRelaySlowReceiver(t *testing.T) {
	x := relayWith(t, time.Minute, func(x *relayed) {
		// A small send buffer towards the client: the relay's writes fall short once the
		// client's receive window is full. (A receive buffer below the loopback MSS would
		// stall any TCP sender on window probes instead.)
		if err := syscall.SetsockoptInt(x.a, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096); err != nil {
			t.Fatal(err)
		}
	})
	data := pattern(2 << 20)
	sent := make(chan error, 1)
	go func() {
		// Paced 8 KiB writes, each read whole by the relay (below its buffer), until the
		// client's window is full; then the rest at once.
		const paced = 1 << 20
		for i := 0; i < paced; i += 8 << 10 {
			if _, err := x.backend.Write(data[i : i+8<<10]); err != nil {
				sent <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := x.backend.Write(data[paced:]); err != nil {
			sent <- err
			return
		}
		sent <- x.backend.CloseWrite()
	}()
	time.Sleep(500 * time.Millisecond) // the client reads nothing yet; the test holds either way
	_ = x.client.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(x.client)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("client got %d bytes (%v), want the %d sent, in order", len(got), err, len(data))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	x.client.CloseWrite()
	x.wait(t)
	if x.ba.Load() != uint64(len(data)) {
		t.Fatalf("counted %d of %d", x.ba.Load(), len(data))
	}
}

// TestRelayIdle: a pair with no byte either way is closed after the idle timeout, not before,
// and Done says so; a pair that keeps moving bytes is not.
func TestRelayIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	busy := relay(t, idle)
	quiet := relay(t, idle)
	start := time.Now()
	for range 8 {
		busy.client.Write([]byte("x"))
		readN(t, busy.backend, 1)
		time.Sleep(idle / 4)
	}
	if !quiet.wait(t) {
		t.Fatal("idle pair not reported idle")
	}
	if el := time.Since(start); el < idle {
		t.Fatalf("closed after %v, before the idle timeout", el)
	}
	readEOF(t, quiet.client)
	select {
	case <-busy.done:
		t.Fatal("busy pair closed")
	default:
	}
	if !busy.wait(t) {
		t.Fatal("busy pair, once quiet, not reported idle")
	}
}

// TestRelayShutdownSockets: shutting both sockets down (as the L4 proxy's Shutdown does past
// its grace period) ends a relayed pair without closing a descriptor under the relay.
func TestRelayShutdownSockets(t *testing.T) {
	x := relay(t, time.Minute)
	x.client.Write([]byte("a"))
	readN(t, x.backend, 1)
	Shutdown(x.a)
	Shutdown(x.b)
	if x.wait(t) {
		t.Fatal("reported idle")
	}
	readEOF(t, x.client)
	readEOF(t, x.backend)
}

// TestRelayIdlePairsHoldNoGoroutine: pairs waiting between bursts cost no goroutine each.
func TestRelayIdlePairsHoldNoGoroutine(t *testing.T) {
	testRelay()
	before := runtime.NumGoroutine()
	const n = 200
	for range n {
		x := relay(t, time.Minute)
		x.client.Write([]byte("x"))
		readN(t, x.backend, 1)
	}
	if grown := runtime.NumGoroutine() - before; grown > n/10 {
		t.Fatalf("%d idle pairs hold %d more goroutines", n, grown)
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
}

// TestRelayBytesThenEnd: bytes and the end that follows them arrive before the relay reads
// (one event reports both): the bytes are passed on, and so is the end, in both directions, on
// many pairs at once. With edge-triggered sockets an end that came with bytes is reported
// once, so a relay that stopped at the short read would never pass it on.
func TestRelayBytesThenEnd(t *testing.T) {
	const pairs = 64
	xs := make([]*relayed, pairs)
	for i := range xs {
		xs[i] = relayWith(t, time.Minute, func(x *relayed) {
			io.WriteString(x.client, "request")
			x.client.CloseWrite()
			io.WriteString(x.backend, "early bytes")
			x.backend.CloseWrite()
			// Both ends are in the relay's sockets' receive queues before Forward.
			waitQueued(t, x.a, len("request"))
			waitQueued(t, x.b, len("early bytes"))
		})
	}
	for _, x := range xs {
		if got := readN(t, x.backend, len("request")); got != "request" {
			t.Fatalf("backend got %q", got)
		}
		readEOF(t, x.backend)
		if got := readN(t, x.client, len("early bytes")); got != "early bytes" {
			t.Fatalf("client got %q", got)
		}
		readEOF(t, x.client)
		x.wait(t)
		if x.ab.Load() != uint64(len("request")) || x.ba.Load() != uint64(len("early bytes")) {
			t.Fatalf("counted %d and %d bytes", x.ab.Load(), x.ba.Load())
		}
	}
}

// waitQueued waits until fd's receive queue holds n bytes (FIONREAD) and the peer's end
// (poll reports POLLRDHUP).
func waitQueued(t *testing.T, fd, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var q int32
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&q)))
		pfd := struct {
			fd             int32
			events, revent int16
		}{fd: int32(fd), events: 0x2000} // POLLRDHUP
		_, _, pe := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&pfd)), 1, 0)
		if e == 0 && pe == 0 && int(q) == n && pfd.revent&0x2000 != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd %d: %d bytes queued (want %d), revents %#x", fd, q, n, pfd.revent)
		}
	}
}

// TestRelayEarly: what the client sent before Forward (Forward moves up to earlyRead bytes
// itself, before the pair joins a shard's set) arrives whole and in order, counted once; an end
// or a reset that came before Forward is passed on as the shard passes it on.
func TestRelayEarly(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 2*earlyRead/16+7) // beyond the early read
	cases := []struct {
		name   string
		before func(t *testing.T, x *relayed) // on the client, before Forward
		check  func(t *testing.T, x *relayed)
	}{
		{"bytes beyond the early read", func(t *testing.T, x *relayed) {
			if _, err := x.client.Write(big); err != nil {
				t.Fatal(err)
			}
			waitBytes(t, x.a, len(big))
		}, func(t *testing.T, x *relayed) {
			if got := readN(t, x.backend, len(big)); got != string(big) {
				t.Fatalf("backend got %d bytes, not the %d sent", len(got), len(big))
			}
			x.client.CloseWrite()
			readEOF(t, x.backend)
			io.WriteString(x.backend, "ok")
			x.backend.CloseWrite()
			if got := readN(t, x.client, 2); got != "ok" {
				t.Fatalf("client got %q", got)
			}
			readEOF(t, x.client)
			if res := x.result(t); res.Moved != [2]uint64{uint64(len(big)), 2} || x.ab.Load() != uint64(len(big)) || res.Failed != -1 {
				t.Fatalf("result %+v, counted %d", res, x.ab.Load())
			}
		}},
		{"end without bytes", func(t *testing.T, x *relayed) {
			x.client.CloseWrite()
			waitQueued(t, x.a, 0)
		}, func(t *testing.T, x *relayed) {
			readEOF(t, x.backend)
			io.WriteString(x.backend, "bye") // the other direction keeps flowing
			x.backend.CloseWrite()
			if got := readN(t, x.client, 3); got != "bye" {
				t.Fatalf("client got %q", got)
			}
			readEOF(t, x.client)
			if res := x.result(t); res.FirstFIN != 0 || res.Moved != [2]uint64{0, 3} || res.Failed != -1 {
				t.Fatalf("result %+v", res)
			}
		}},
		{"reset", func(t *testing.T, x *relayed) {
			io.WriteString(x.client, "partial")
			x.client.SetLinger(0)
			x.client.Close()
			waitReset(t, x.a)
		}, func(t *testing.T, x *relayed) {
			_ = x.backend.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(x.backend); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("backend read %v, want a reset", err)
			}
			if res := x.result(t); res.Failed != 0 || res.Errno != syscall.ECONNRESET {
				t.Fatalf("result %+v", res)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := &relayed{done: make(chan bool, 1)}
			x.client, x.a = acceptedPair(t)
			x.backend, x.b = dialedPair(t)
			c.before(t, x)
			x.res = new(RelayResult)
			testRelay().Forward(RelayFlow{A: x.a, B: x.b, Idle: time.Minute, AB: &x.ab, BA: &x.ba, Resets: true, Result: x.res,
				Done: func(idled bool) { x.done <- idled }})
			c.check(t, x)
		})
	}
}

// result waits for the pair's end and returns its Result.
func (x *relayed) result(t *testing.T) RelayResult {
	t.Helper()
	x.wait(t)
	return *x.res
}

// waitBytes waits until fd's receive queue holds n bytes (FIONREAD).
func waitBytes(t *testing.T, fd, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var q int32
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&q)))
		if e == 0 && int(q) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd %d: %d bytes queued, want %d", fd, q, n)
		}
	}
}

// waitReset waits until fd's peer has reset it (poll reports POLLERR).
func waitReset(t *testing.T, fd int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		pfd := struct {
			fd             int32
			events, revent int16
		}{fd: int32(fd), events: 1} // POLLIN; POLLERR is always reported
		_, _, pe := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&pfd)), 1, 0)
		if pe == 0 && pfd.revent&0x8 != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd %d: revents %#x, no reset", fd, pfd.revent)
		}
	}
}
