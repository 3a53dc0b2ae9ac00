package peertest

import (
	"io"
	"net"
	"testing"
)

// TCPGreeter is a TCP backend on loopback that greets every connection with its name and a
// newline, then echoes what it reads, so a test sees which backend a proxied connection reached
// and that bytes flow both ways.
func TCPGreeter(t testing.TB, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.WriteString(c, name+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// UDPNamer is a UDP backend on loopback that answers each datagram with its name, a colon and
// the datagram.
func UDPNamer(t testing.TB, name string) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(append([]byte(name+":"), buf[:n]...), from)
		}
	}()
	return c.LocalAddr().String()
}
