//go:build linux

package tlsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"ballast/evloop"
	"ballast/internal/testcert"
)

// dialer is one client connection made on a shard: the shard's non-blocking connect, the
// handshake in a goroutine (Client, Handshake), then on the shard Attach, a message written
// and its echo read through crypto/tls. It reports "ok resumed=<bool> alpn=<proto>" or what
// failed.
type dialer struct {
	evloop.FD
	cfg   *tls.Config
	c     *Conn
	msg   string
	want  string // what the server answers; "" for the echo of msg
	got   []byte
	state int
	res   chan string
}

func (d *dialer) Event(evloop.Events) {
	switch d.state {
	case 0: // connecting
		if d.Ready&(evloop.Writable|evloop.Hangup) == 0 {
			return
		}
		if err := d.ConnectResult(); err != nil {
			d.fail("connect: %v", err)
			return
		}
		c, err := Client(d.Fd, d.cfg)
		if err != nil {
			d.fail("client: %v", err)
			return
		}
		d.c, d.state = c, 1
		s := d.Shard()
		go func() { s.Post(handshaken{d, c.Handshake(5 * time.Second)}) }()
	case 2: // reading the echo
		buf := d.Shard().Buf()
		for d.Ready&evloop.Readable != 0 {
			n, err := d.c.Read(buf)
			if err == evloop.ErrAgain {
				return
			}
			if err != nil {
				d.fail("read: %v", err)
				return
			}
			d.got = append(d.got, buf[:n]...)
			want := d.want
			if want == "" {
				want = d.msg
			}
			if len(d.got) == len(want) {
				cs := d.c.ConnectionState()
				if string(d.got) != want {
					d.fail("echo %d bytes differ", len(d.got))
					return
				}
				d.done(fmt.Sprintf("ok resumed=%v alpn=%s", cs.DidResume, cs.NegotiatedProtocol))
				return
			}
		}
	}
}

func (d *dialer) fail(f string, args ...any) { d.done(fmt.Sprintf(f, args...)) }

func (d *dialer) done(s string) {
	d.state = 3
	if d.c != nil {
		d.c.Release()
	}
	d.Close()
	d.res <- s
}

type handshaken struct {
	d   *dialer
	err error
}

func (h handshaken) Run(*evloop.Shard) {
	d := h.d
	if h.err != nil {
		d.fail("handshake: %v", h.err)
		return
	}
	d.c.Attach(&d.FD)
	d.state = 2
	// Large messages go out in several records and short writes: offer the rest first.
	for off := 0; off < len(d.msg); {
		n, err := d.c.Write([]byte(d.msg[off:]))
		if err != nil && err != evloop.ErrAgain {
			d.fail("write: %v", err)
			return
		}
		off += n
		if n == 0 {
			time.Sleep(time.Millisecond) // the test's echo drains the socket
		}
	}
	d.Ready |= evloop.Readable
	d.Event(0)
}

// dial runs one dialer on shard s of g.
type dialTask struct {
	d  *dialer
	ap netip.AddrPort
}

func (t dialTask) Run(s *evloop.Shard) {
	done, err := s.Connect(&t.d.FD, t.ap, t.d)
	if err != nil {
		t.d.res <- "connect: " + err.Error()
		return
	}
	if done {
		t.d.Ready |= evloop.Writable
		t.d.Event(0)
	}
}

// TestClient: client connections made on a shard handshake off it (verifying the server's
// name against the given roots, ALPN as configured), then their records are written and
// read on the shard, a large message too; a second connection with the same configuration
// resumes the session the first was given.
func TestClient(t *testing.T) {
	cert := testcert.New(t, "backend.test")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	cfg := &tls.Config{ServerName: "backend.test", RootCAs: roots, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	g, err := evloop.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	run := func(cfg *tls.Config, msg string) string {
		d := &dialer{cfg: cfg, msg: msg, res: make(chan string, 1)}
		g.Shards()[0].Post(dialTask{d, ap})
		select {
		case r := <-d.res:
			return r
		case <-time.After(10 * time.Second):
			return "no answer in 10 s"
		}
	}
	if r := run(cfg, "ping"); r != "ok resumed=false alpn=http/1.1" {
		t.Fatalf("first connection: %s", r)
	}
	if r := run(cfg, strings.Repeat("0123456789abcdef", 16<<10)); r != "ok resumed=true alpn=http/1.1" {
		t.Fatalf("second connection (256 KiB echoed, 16 records): %s", r)
	}
	wrong := cfg.Clone()
	wrong.ServerName, wrong.ClientSessionCache = "other.test", nil
	if r := run(wrong, "ping"); !strings.Contains(r, "handshake: ") || !strings.Contains(r, "other.test") {
		t.Fatalf("a name the certificate lacks: %s", r)
	}
}

// TestClientCancel: Cancel ends a handshake stalled on a server that never answers at once,
// long before its deadline.
func TestClientCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // holds it open, silent
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	f, err := raw.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := Client(int(f.Fd()), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Handshake(time.Minute) }()
	time.Sleep(100 * time.Millisecond)
	c.Cancel()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("cancelled handshake: %v, want a timeout", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("cancelled after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Cancel did not end the handshake")
	}
	c.Release()
}

// TestClientRecordsInOneRead: a server's many small records arriving in one read(2) are all
// delivered, with no edge to come for those crypto/tls holds (Read keeps Readable set while
// whole records wait), and a record split across reads waits for the socket.
func TestClientRecordsInOneRead(t *testing.T) {
	cert := testcert.New(t, "backend.test")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const records = 200
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4)
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				for i := range records { // one record each, back to back: the socket joins them
					if _, err := fmt.Fprintf(c, "%04d", i); err != nil {
						return
					}
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	g, err := evloop.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var want strings.Builder
	for i := range records {
		fmt.Fprintf(&want, "%04d", i)
	}
	for run := range 20 {
		d := &dialer{cfg: &tls.Config{InsecureSkipVerify: true}, msg: "ping", want: want.String(), res: make(chan string, 1)}
		g.Shards()[0].Post(dialTask{d, netip.MustParseAddrPort(ln.Addr().String())})
		select {
		case r := <-d.res:
			if !strings.HasPrefix(r, "ok ") {
				t.Fatalf("run %d: %s", run, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: stalled before the %d bytes were read", run, want.Len())
		}
	}
}
