package h1conformance

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// RawBackend is a TCP server that records every byte it receives. It answers each request it
// can frame strictly with a fixed small response, and closes a connection on bytes it cannot
// frame. got holds, in the order received, each framed request followed by whatever could
// not be framed when its connection ended.
type RawBackend struct {
	ln      net.Listener
	mu      sync.Mutex
	got     []byte
	reqs    []Request
	pending map[net.Conn][]byte // connections that hold part of a request
	wg      sync.WaitGroup
}

const rawBackendResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// NewRawBackend listens on a loopback port until the test ends.
func NewRawBackend(t testing.TB) *RawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &RawBackend{ln: ln, pending: make(map[net.Conn][]byte)}
	rb.wg.Add(1)
	go rb.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		rb.mu.Lock()
		for c := range rb.pending {
			_ = c.Close()
		}
		rb.mu.Unlock()
		rb.wg.Wait()
	})
	return rb
}

// Addr is the backend's host:port.
func (rb *RawBackend) Addr() string { return rb.ln.Addr().String() }

func (rb *RawBackend) accept() {
	defer rb.wg.Done()
	for {
		c, err := rb.ln.Accept()
		if err != nil {
			return
		}
		rb.mu.Lock()
		rb.pending[c] = nil
		rb.mu.Unlock()
		rb.wg.Add(1)
		go rb.serve(c)
	}
}

func (rb *RawBackend) serve(c net.Conn) {
	defer rb.wg.Done()
	defer c.Close()
	var buf []byte
	p := make([]byte, 64<<10)
	for {
		n, err := c.Read(p)
		buf = append(buf, p[:n]...)
		for len(buf) > 0 {
			r, m, ferr := ReadStrict(buf, false)
			if ferr == ErrIncomplete {
				break
			}
			rb.mu.Lock()
			if ferr != nil {
				rb.got = append(rb.got, buf...)
				delete(rb.pending, c)
				rb.mu.Unlock()
				return
			}
			r.Raw = append([]byte(nil), r.Raw...)
			r.Body = append([]byte(nil), r.Body...)
			rb.got = append(rb.got, r.Raw...)
			rb.reqs = append(rb.reqs, r)
			buf = buf[m:]
			rb.mu.Unlock()
			if _, werr := c.Write([]byte(rawBackendResponse)); werr != nil {
				err = werr
				break
			}
		}
		rb.mu.Lock()
		if err != nil {
			rb.got = append(rb.got, buf...)
			delete(rb.pending, c)
			rb.mu.Unlock()
			return
		}
		rb.pending[c] = buf
		rb.mu.Unlock()
	}
}

// Take waits until no open connection holds part of a request (bounded: a proxy that leaves
// half a request on a connection it keeps open fails here) and returns and clears what was
// received.
func (rb *RawBackend) Take(t testing.TB) ([]byte, []Request) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rb.mu.Lock()
		busy := false
		for _, b := range rb.pending {
			busy = busy || len(b) > 0
		}
		if !busy || time.Now().After(deadline) {
			got, reqs := rb.got, rb.reqs
			rb.got, rb.reqs = nil, nil
			rb.mu.Unlock()
			if busy {
				t.Errorf("backend holds part of a request 5 s after the client finished")
			}
			return got, reqs
		}
		rb.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// Exchange writes raw on a fresh connection to addr, half-closes it and returns everything
// the proxy answered up to its close (bounded by a 10 s deadline).
func Exchange(t testing.TB, addr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(raw); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	var out []byte
	p := make([]byte, 32<<10)
	for {
		n, err := c.Read(p)
		out = append(out, p[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the proxy did not close the connection within 10 s; got %q", out)
			}
			return out
		}
	}
}
