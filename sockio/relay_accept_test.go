//go:build linux

package sockio

import (
	"io"
	"net"
	"net/netip"
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
