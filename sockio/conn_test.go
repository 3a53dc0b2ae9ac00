//go:build linux

package sockio

import (
	"ballast/internal/peertest"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRawConn(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, raw, peer net.Conn)
	}{
		{"read and write round trip", func(t *testing.T, raw, peer net.Conn) {
			go func() { _, _ = peer.Write([]byte("ping")) }()
			buf := make([]byte, 16)
			n, err := io.ReadAtLeast(raw, buf, 4)
			if err != nil || string(buf[:n]) != "ping" {
				t.Fatalf("read %q, %v; want ping", buf[:n], err)
			}
			big := []byte(strings.Repeat("x", 4<<20)) // more than a socket buffer: EAGAIN then wait
			got := make(chan int, 1)
			go func() { n, _ := io.Copy(io.Discard, io.LimitReader(peer, int64(len(big)))); got <- int(n) }()
			if n, err := raw.Write(big); err != nil || n != len(big) {
				t.Fatalf("write = %d, %v; want %d", n, err, len(big))
			}
			if n := <-got; n != len(big) {
				t.Fatalf("peer read %d bytes, want %d", n, len(big))
			}
		}},
		{"end of stream is io.EOF", func(t *testing.T, raw, peer net.Conn) {
			_ = peer.Close()
			if _, err := raw.Read(make([]byte, 8)); err != io.EOF {
				t.Fatalf("read after peer close: %v, want io.EOF", err)
			}
		}},
		{"read deadline times out", func(t *testing.T, raw, peer net.Conn) {
			_ = raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, err := raw.Read(make([]byte, 8))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read with passed deadline: %v, want a timeout", err)
			}
		}},
		{"a later deadline replaces a passed one", func(t *testing.T, raw, peer net.Conn) {
			_ = raw.SetReadDeadline(time.Now().Add(-time.Second)) // armed, already passed
			_ = raw.SetReadDeadline(time.Now().Add(time.Hour))    // wanted: kept lazily
			go func() { _, _ = peer.Write([]byte("late")) }()
			buf := make([]byte, 8)
			if n, err := io.ReadAtLeast(raw, buf, 4); err != nil || string(buf[:n]) != "late" {
				t.Fatalf("read = %q, %v; want late (the passed deadline was replaced)", buf[:n], err)
			}
		}},
		{"a cleared deadline does not fire", func(t *testing.T, raw, peer net.Conn) {
			_ = raw.SetReadDeadline(time.Now().Add(-time.Second))
			_ = raw.SetReadDeadline(time.Time{})
			go func() { _, _ = peer.Write([]byte("none")) }()
			buf := make([]byte, 8)
			if n, err := io.ReadAtLeast(raw, buf, 4); err != nil || string(buf[:n]) != "none" {
				t.Fatalf("read = %q, %v; want none (the deadline was cleared)", buf[:n], err)
			}
		}},
		{"an earlier deadline replaces a later one", func(t *testing.T, raw, peer net.Conn) {
			_ = raw.SetReadDeadline(time.Now().Add(time.Hour))
			_ = raw.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := raw.Read(make([]byte, 8))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read = %v, want a passed deadline", err)
			}
		}},
		{"close wakes a blocked read", func(t *testing.T, raw, peer net.Conn) {
			done := make(chan error, 1)
			go func() { _, err := raw.Read(make([]byte, 8)); done <- err }()
			time.Sleep(10 * time.Millisecond) // let the read park; the result does not depend on it
			_ = raw.Close()
			if err := <-done; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read on closed conn: %v, want net.ErrClosed", err)
			}
		}},
		{"write to a reset peer fails", func(t *testing.T, raw, peer net.Conn) {
			_ = peer.(*net.TCPConn).SetLinger(0)
			_ = peer.Close()
			var err error
			for i := 0; i < 100 && err == nil; i++ {
				_, err = raw.Write([]byte("data"))
			}
			if err == nil {
				t.Fatal("100 writes to a reset connection all succeeded")
			}
		}},
		{"close write reaches the peer", func(t *testing.T, raw, peer net.Conn) {
			if err := raw.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := peer.Read(make([]byte, 8)); err != io.EOF {
				t.Fatalf("peer read after CloseWrite: %v, want io.EOF", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, s := peertest.TCPPair(t)
			raw := NewConn(s)
			if _, ok := raw.(*Conn); !ok {
				t.Fatalf("NewConn(TCPConn) = %T, want *Conn", raw)
			}
			tc.run(t, raw, c)
		})
	}
}

func TestRawConnConcurrentReadWrite(t *testing.T) {
	c, s := peertest.TCPPair(t)
	raw := NewConn(s)
	const n = 1 << 20
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(c, io.LimitReader(c, n)) }() // echo peer
	var got int64
	go func() {
		defer wg.Done()
		got, _ = io.Copy(io.Discard, io.LimitReader(raw, n))
	}()
	chunk := make([]byte, 32<<10)
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := raw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got != n {
		t.Fatalf("echoed %d bytes, want %d", got, n)
	}
}
