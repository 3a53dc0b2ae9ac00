//go:build linux

package sockio

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestConnectFirst: a dialer whose Control is ConnectFirst connects to a listening loopback
// port (IPv4 and IPv6) and the connection carries bytes; a closed port is refused as without
// it; a handshake that cannot finish (the listener's accept queue is full, so its SYN is
// dropped) times out instead of passing for connected.
func TestConnectFirst(t *testing.T) {
	d := &net.Dialer{Timeout: 2 * time.Second, Control: ConnectFirst}
	for _, network := range []string{"tcp4", "tcp6"} {
		ln, err := net.Listen(network, map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network])
		if err != nil {
			t.Logf("%s: %v (skipped)", network, err)
			continue
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				io.Copy(c, c)
				c.Close()
			}
		}()
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		c.Write([]byte("hi"))
		if got := readN(t, c, 2); got != "hi" {
			t.Fatalf("%s: echoed %q", network, got)
		}
		c.Close()
		addr := ln.Addr().String()
		ln.Close()
		if _, err := d.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: dial to a closed port: %v, want connection refused", network, err)
		}
	}

	// A listener with a backlog of 0 whose one queued connection is never accepted.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	short := &net.Dialer{Timeout: 300 * time.Millisecond, Control: ConnectFirst}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 4 { // the queue holds one or two, depending on the kernel
		c, err := short.Dial("tcp", addr)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("dial into a full accept queue: %v, want a timeout", err)
			}
			return
		}
		held = append(held, c)
	}
	t.Fatal("every dial into a full accept queue passed for connected")
}
