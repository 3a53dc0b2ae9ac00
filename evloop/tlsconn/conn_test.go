//go:build linux

package tlsconn

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ballast/evloop"
	"ballast/internal/testcert"
)

// echo is a TLS echo served on a shard: what it reads it writes back, keeping what the
// client does not take in a pooled buffer and reading nothing meanwhile (backpressure).
type echo struct {
	evloop.FD
	c       *Conn
	pending []byte
	maxPend *atomic.Int64 // the most ciphertext seen pending at once
	eof     *atomic.Int64 // connections that read the client's close_notify
}

func (e *echo) Event(evloop.Events) {
	s := e.Shard()
	if s == nil {
		return
	}
	if len(e.pending) > 0 {
		n, err := e.c.Write(e.pending)
		if err != nil && err != evloop.ErrAgain {
			e.close()
			return
		}
		e.note()
		e.pending = e.pending[:copy(e.pending, e.pending[n:])]
		if len(e.pending) > 0 {
			return
		}
		s.PutBuf(e.pending)
		e.pending = nil
	}
	for e.Ready&evloop.Readable != 0 {
		n, err := e.c.Read(s.Buf())
		if err == evloop.ErrAgain {
			break
		}
		if err != nil {
			if err == io.EOF {
				e.eof.Add(1)
			}
			e.close()
			return
		}
		data := s.Buf()[:n]
		w, err := e.c.Write(data)
		if err != nil && err != evloop.ErrAgain {
			e.close()
			return
		}
		e.note()
		if w < n {
			e.pending = append(s.GetBuf(n-w), data[w:]...)
			return
		}
	}
}

func (e *echo) note() {
	if p := int64(len(e.c.t.wbuf) - e.c.t.sent); p > e.maxPend.Load() {
		e.maxPend.Store(p)
	}
}

func (e *echo) close() {
	if e.pending != nil {
		e.Shard().PutBuf(e.pending)
		e.pending = nil
	}
	e.c.Release()
	e.Close()
}

type attachTask struct {
	fd int
	c  *Conn
	e  *echo
}

func (a attachTask) Run(s *evloop.Shard) {
	if err := s.Add(&a.e.FD, a.fd, a.e); err != nil {
		_ = syscall.Close(a.fd)
		return
	}
	a.e.c = a.c
	a.c.Attach(&a.e.FD)
	a.e.Ready = evloop.Readable | evloop.Writable // bytes may have come with the handshake
	a.e.Event(0)
}

type server struct {
	addr              string
	maxPend, eof      atomic.Int64
	handshakeFailures atomic.Int64
}

func startServer(t *testing.T, timeout time.Duration) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := evloop.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	srv := &server{addr: ln.Addr().String()}
	cfg := &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "tls.test")}}
	l, err := g.Listen(ln.(*net.TCPListener), func(s *evloop.Shard, fd int, _ netip.AddrPort) {
		go func() {
			c, err := Handshake(fd, cfg, timeout)
			if err != nil {
				srv.handshakeFailures.Add(1)
				_ = syscall.Close(fd)
				return
			}
			s.Post(attachTask{fd: fd, c: c, e: &echo{maxPend: &srv.maxPend, eof: &srv.eof}})
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		_ = ln.Close()
		g.Close()
	})
	return srv
}

func dial(t *testing.T, addr string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestEchoRoundTrips: many small messages each way on several connections, the first sent
// at once after the handshake (it may come with the client's Finished).
func TestEchoRoundTrips(t *testing.T) {
	srv := startServer(t, 5*time.Second)
	for range 4 {
		c := dial(t, srv.addr)
		buf := make([]byte, 256)
		for i := range 200 {
			msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if !bytes.Equal(buf[:len(msg)], msg) {
				t.Fatalf("message %d: got %q", i, buf[:len(msg)])
			}
		}
	}
}

// TestEchoBulkBackpressure: 64 MiB through the echo while the client reads slowly at first:
// everything comes back in order, and the ciphertext the server kept pending never passed one
// write chunk's (the shard stops reading while its client does not take the echo).
func TestEchoBulkBackpressure(t *testing.T) {
	srv := startServer(t, 5*time.Second)
	c := dial(t, srv.addr)
	const total = 64 << 20
	errc := make(chan error, 1)
	go func() {
		block := make([]byte, 256<<10)
		for i := range block {
			block[i] = byte(i * 7)
		}
		for sent := 0; sent < total; sent += len(block) {
			if _, err := c.Write(block); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	time.Sleep(200 * time.Millisecond) // the server fills the socket towards us and stops
	got := 0
	buf := make([]byte, 64<<10)
	for got < total {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		for i := range n {
			if buf[i] != byte((got+i)%(256<<10)*7) {
				t.Fatalf("byte %d: %d", got+i, buf[i])
			}
		}
		got += n
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if p := srv.maxPend.Load(); p == 0 || p > 16<<10 {
		t.Fatalf("most ciphertext pending at once: %d bytes (want 1..16 KiB: the socket filled, and one chunk at most waited)", p)
	}
}

// TestCloseNotify: the client's close_notify reads as the end of the stream.
func TestCloseNotify(t *testing.T) {
	srv := startServer(t, 5*time.Second)
	c := dial(t, srv.addr)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(c, one); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.eof.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if srv.eof.Load() != 1 {
		t.Fatal("the server did not read the close_notify as the end")
	}
}

// TestHandshakeFailures: bytes that are not TLS fail the handshake at once; a client that
// sends nothing fails it at the timeout; neither reaches a shard.
func TestHandshakeFailures(t *testing.T) {
	srv := startServer(t, 300*time.Millisecond)
	c, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("plain bytes: %v", err)
	}
	quiet, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	start := time.Now()
	_ = quiet.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadAll(quiet); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("quiet client: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("a quiet client was closed after %v; the handshake timeout is 300ms", d)
	}
	if n := srv.handshakeFailures.Load(); n != 2 {
		t.Fatalf("handshake failures: %d, want 2", n)
	}
}

// TestHandshakeWithPrefix: a server that read the start of the ClientHello itself (as a PROXY
// header's reader may) hands those bytes to HandshakeWith: the handshake completes, the
// connection (crypto/tls over the handshake's duplicate) reports Options' addresses, and data flows both ways.
func TestHandshakeWithPrefix(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "tls.test")}}
	remote := &net.TCPAddr{IP: net.ParseIP("198.51.100.7"), Port: 4000}
	errc := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer nc.Close()
		prefix := make([]byte, 7) // the record header and two bytes of the ClientHello
		if _, err := io.ReadFull(nc, prefix); err != nil {
			errc <- err
			return
		}
		f, err := nc.(*net.TCPConn).File()
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		c, err := HandshakeWith(int(f.Fd()), cfg, 5*time.Second, Options{Prefix: prefix, Remote: remote})
		if err != nil {
			errc <- err
			return
		}
		tc := c.tc // crypto/tls over the handshake's blocking duplicate
		defer tc.Close()
		if got := tc.RemoteAddr().String(); got != remote.String() {
			errc <- errors.New("RemoteAddr " + got + ", want " + remote.String())
			return
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(tc, buf); err != nil {
			errc <- err
			return
		}
		_, err = tc.Write(buf)
		errc <- err
	}()
	c := dial(t, ln.Addr().String())
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
