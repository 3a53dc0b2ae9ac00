package l4

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"ballast/sockio"
)

// BenchmarkUDPDatagram is the per-datagram path of an existing flow: the flow lookup, the
// activity stamp, the counters and the write to the flow's connected backend socket.
func BenchmarkUDPDatagram(b *testing.B) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
	pool := newPool(b, "u", "leastconn", 0, 0, sink.LocalAddr().String())
	p := NewUDP(UDPOptions{}, pool)
	listener, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer listener.Close()
	fd, family, err := sockio.DupUDP(listener)
	if err != nil {
		b.Fatal(err)
	}
	fr := &front{fd: fd, family: family}
	fr.ref.acquire()
	defer fr.ref.release(fd)
	local := listener.LocalAddr().(*net.UDPAddr).AddrPort()
	client := netip.MustParseAddrPort("127.0.0.1:40000")
	msg := make([]byte, 64)
	p.forward(fr, local, client, msg) // creates the flow
	b.ReportAllocs()
	for b.Loop() {
		p.forward(fr, local, client, msg)
	}
	b.StopTimer()
	if p.Stats().Created != 1 {
		b.Fatalf("flows created: %d", p.Stats().Created)
	}
	p.Shutdown(b.Context())
}

// BenchmarkTCPConnection is one connection's whole life through the proxy: accept, pick,
// connect, one byte each way, close.
func BenchmarkTCPConnection(b *testing.B) {
	be := tcpServer(b, echo)
	_, addr := startTCP(b, TCPOptions{}, Route{Pool: newPool(b, "p", "leastconn", 0, 0, be)})
	buf := make([]byte, 1)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.Write(buf)
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
