//go:build linux

package sockio

import (
	"ballast/internal/peertest"
	"io"
	"net"
	"testing"
	"time"
)

// TestPoller parks real sockets: bytes from the peer (or its close) wake the connection with
// nothing consumed, a passed deadline closes it, and Close closes what is parked.
func TestPoller(t *testing.T) {
	woken := make(chan net.Conn, 4)
	p, err := NewPoller(func(c net.Conn) { woken <- c }) // buffered: never blocks here
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	park := func(deadline time.Time) (peer, c net.Conn) {
		peer, s := peertest.TCPPair(t)
		c = NewConn(s)
		if !p.Park(c, c.(*Conn).RawConn(), deadline) {
			t.Fatal("Park refused")
		}
		return peer, c
	}
	wait := func(what string) net.Conn {
		select {
		case c := <-woken:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not woken", what)
			return nil
		}
	}

	peer, c := park(time.Time{})
	if _, err := peer.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	if got := wait("bytes arrived"); got != c {
		t.Fatal("woke another connection")
	}
	buf := make([]byte, 8)
	if n, err := io.ReadAtLeast(c, buf, 4); err != nil || string(buf[:n]) != "next" {
		t.Fatalf("after wake read %q, %v; want the bytes that woke it", buf[:n], err)
	}
	if p.Len() != 0 {
		t.Fatalf("Len = %d after the wake, want 0", p.Len())
	}
	// Parked again with the bytes already waiting: woken at once.
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // let the byte arrive; the wake below does not depend on it
	if !p.Park(c, c.(*Conn).RawConn(), time.Time{}) {
		t.Fatal("Park refused")
	}
	wait("bytes waiting when parked")

	peer2, c2 := park(time.Time{})
	_ = peer2.Close()
	if got := wait("peer closed"); got != c2 {
		t.Fatal("woke another connection")
	}
	if _, err := c2.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer's close: %v, want EOF", err)
	}

	peer3, _ := park(time.Now().Add(50 * time.Millisecond))
	_ = peer3.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer3.Read(buf); err != io.EOF {
		t.Fatalf("peer of a connection past its deadline read %v, want EOF", err)
	}

	peer4, _ := park(time.Time{})
	p.Close()
	_ = peer4.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer4.Read(buf); err != io.EOF {
		t.Fatalf("peer of a connection parked at Close read %v, want EOF", err)
	}
	_, s5 := peertest.TCPPair(t)
	if c5 := NewConn(s5); p.Park(c5, c5.(*Conn).RawConn(), time.Time{}) {
		t.Fatal("Park accepted after Close")
	}
}
