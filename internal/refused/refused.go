// Package refused gives tests a loopback TCP address that refuses connections and stays
// refusing for as long as the test runs.
//
// The usual trick (listen on port 0, note the port, close) frees the port for the next
// Listen of any test running in parallel, and a request meant to be refused then reaches some
// other test's server. Here the port stays bound to a socket that never listens: the kernel
// answers a SYN to it with a reset and gives the port to nobody else until the test's cleanup
// closes the socket.
//
// Safe for concurrent use: each call owns its own socket.
package refused

import (
	"net"
	"syscall"
	"testing"
)

// TCP returns "127.0.0.1:port" where a connect is refused until t's cleanup.
func TCP(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("refused: socket: %v", err)
	}
	syscall.CloseOnExec(fd) // not SOCK_CLOEXEC, which only Linux has: the tests run elsewhere too
	// No SO_REUSEADDR: no other socket may bind the port while this one holds it.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatalf("refused: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatalf("refused: getsockname: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	in4 := sa.(*syscall.SockaddrInet4)
	return (&net.TCPAddr{IP: net.IP(in4.Addr[:]), Port: in4.Port}).String()
}
