//go:build linux

package sockio

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

func loopbackListener(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// TestAcceptorBatch: connections waiting on the listener are accepted in one call (up to max),
// each a non-blocking descriptor with TCP_NODELAY and the client's address as the peer.
func TestAcceptorBatch(t *testing.T) {
	ln := loopbackListener(t)
	a, err := NewAcceptor(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var clients []netip.AddrPort
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c.LocalAddr().(*net.TCPAddr).AddrPort())
	}
	var got []netip.AddrPort
	for len(got) < 3 {
		err := a.Accept(2, func(fd int, peer netip.AddrPort) {
			defer Close(fd)
			got = append(got, peer)
			fl, _ := fcntl(fd, syscall.F_GETFL)
			if fl&syscall.O_NONBLOCK == 0 {
				t.Errorf("accepted descriptor is blocking")
			}
			if v, err := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); err != nil || v == 0 {
				t.Errorf("TCP_NODELAY = %d, %v", v, err)
			}
			if la := LocalAddr(fd); la != ln.Addr().(*net.TCPAddr).AddrPort() {
				t.Errorf("LocalAddr = %v, want the listener's %v", la, ln.Addr())
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatal("Accept returned nil with nothing accepted")
		}
	}
	for i := range clients {
		if got[i] != clients[i] {
			t.Fatalf("peer %d = %v, want the client's %v", i, got[i], clients[i])
		}
	}
}

// TestAcceptorEndsWhenClosed: Accept waiting on an idle listener returns an error when the
// acceptor is closed, and when the listener is (within the recheck period).
func TestAcceptorEndsWhenClosed(t *testing.T) {
	for _, closeListener := range []bool{false, true} {
		ln := loopbackListener(t)
		a, err := NewAcceptor(ln)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Accept(8, func(fd int, _ netip.AddrPort) { Close(fd) }) }()
		time.Sleep(50 * time.Millisecond) // let it wait; the test holds either way
		if closeListener {
			ln.Close()
		} else {
			a.Close()
		}
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("closeListener=%v: Accept returned nil", closeListener)
			}
		case <-time.After(acceptorRecheck + 5*time.Second):
			t.Fatalf("closeListener=%v: Accept still waiting", closeListener)
		}
		a.Close()
	}
}

// TestDial: a listening port connects (on loopback inside the first connect), a closed port is
// refused, and a listener whose accept queue is full leaves the connect in progress until it
// is accepted (waiting in the poller) or the timeout passes.
func TestDial(t *testing.T) {
	ln := loopbackListener(t)
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	fd, err := Dial(ap, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Write(fd, []byte("hi")); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := readN(t, c, 2); got != "hi" {
		t.Fatalf("peer read %q", got)
	}
	c.Close()
	Close(fd)

	closed := loopbackListener(t)
	cap := closed.Addr().(*net.TCPAddr).AddrPort()
	closed.Close()
	if fd, err := Dial(cap, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		Close(fd)
		t.Fatalf("Dial to a closed port: %v, want connection refused", err)
	}

	// A listener with a backlog of one that accepts nothing: once its queue is full, the
	// kernel drops further SYNs and the connect stays in progress.
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(lfd)
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(lfd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(lfd)
	full := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	var held []int
	defer func() {
		for _, fd := range held {
			Close(fd)
		}
	}()
	var stuck error
	for range 8 { // fill the queue until a connect cannot complete
		fd, err := Dial(full, 300*time.Millisecond)
		if err != nil {
			stuck = err
			break
		}
		held = append(held, fd)
	}
	if !errors.Is(stuck, syscall.ETIMEDOUT) {
		t.Fatalf("Dial to a full queue: %v, want a timeout", stuck)
	}
	// Now one that waits: accepting makes room, the SYN's retransmission (after about a
	// second) completes the connect.
	type dialed struct {
		fd  int
		err error
	}
	res := make(chan dialed, 1)
	go func() {
		fd, err := Dial(full, 10*time.Second)
		res <- dialed{fd, err}
	}()
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < len(held)+1; i++ {
		if nfd, _, err := syscall.Accept(lfd); err == nil {
			defer syscall.Close(nfd)
		}
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("Dial after the queue had room: %v", r.err)
		}
		Close(r.fd)
	case <-time.After(15 * time.Second):
		t.Fatal("Dial did not return")
	}
}

func fcntl(fd, cmd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
