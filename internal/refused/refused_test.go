package refused

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// The address refuses a connect, and a port-0 Listen made while it is held never gets its port.
func TestTCP(t *testing.T) {
	addr := TCP(t)
	_, err := net.Dial("tcp", addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	for i := 0; i < 2000; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := ln.Addr().String()
		ln.Close()
		if got == addr {
			t.Fatalf("listen %d was given the held port %s", i, addr)
		}
	}
	if _, err := net.Listen("tcp", addr); err == nil {
		t.Fatalf("listen on the held address %s succeeded", addr)
	}
}
