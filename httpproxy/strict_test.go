package httpproxy

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"ballast/httpcore"
)

// This file holds an HTTP/1.1 request framer written from RFC 9112 independently of fasthttp,
// and a raw backend that records what it receives. The conformance table and the fuzz target
// use them to check what Ballast forwards.

var (
	errIncomplete = errors.New("incomplete request")
	errInvalid    = errors.New("invalid request")
)

// strictReq is one request as the reference framer understood it.
type strictReq struct {
	method, target, proto string
	hosts                 []string
	body                  []byte // after removing chunked framing
	raw                   []byte // the wire bytes of the whole request
}

// readStrict frames one request at the start of b. lenient accepts a bare LF as a line end in
// the head (a recipient MAY, RFC 9112 §2.2), which is what a client may send; a backend is
// read without it, so that what Ballast writes must be CRLF throughout. Obs-fold, a field
// name that is not a token, control characters, duplicate or malformed Content-Length,
// Transfer-Encoding other than a single "chunked", Transfer-Encoding with Content-Length
// or in HTTP/1.0 are all invalid.
func readStrict(b []byte, lenient bool) (r strictReq, n int, err error) {
	p := 0
	line := func() ([]byte, error) {
		i := bytes.IndexByte(b[p:], '\n')
		if i < 0 {
			return nil, errIncomplete
		}
		l := b[p : p+i]
		p += i + 1
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		} else if !lenient {
			return nil, errInvalid
		}
		if bytes.IndexByte(l, '\r') >= 0 {
			return nil, errInvalid
		}
		return l, nil
	}
	// RFC 9112 §2.2: empty lines before the request line are ignored.
	var rl []byte
	for {
		if rl, err = line(); err != nil {
			return r, 0, err
		}
		if len(rl) > 0 {
			break
		}
	}
	parts := bytes.Split(rl, []byte{' '})
	if len(parts) != 3 || !httpcore.IsToken(parts[0]) || len(parts[1]) == 0 {
		return r, 0, errInvalid
	}
	for _, c := range parts[1] {
		if c <= ' ' || c >= 0x7f {
			return r, 0, errInvalid
		}
	}
	r.method, r.target, r.proto = string(parts[0]), string(parts[1]), string(parts[2])
	if r.proto != "HTTP/1.1" && r.proto != "HTTP/1.0" {
		return r, 0, errInvalid
	}
	var cls, tes []string
	if err = readFields(line, func(name, value []byte) {
		switch {
		case httpcore.LowerEqualFold(name, "host"):
			r.hosts = append(r.hosts, string(value))
		case httpcore.LowerEqualFold(name, "content-length"):
			cls = append(cls, string(value))
		case httpcore.LowerEqualFold(name, "transfer-encoding"):
			tes = append(tes, string(value))
		}
	}); err != nil {
		return r, 0, err
	}
	if len(r.hosts) > 1 || len(cls) > 1 || len(tes) > 1 || len(tes) == 1 && (len(cls) > 0 || r.proto == "HTTP/1.0") {
		return r, 0, errInvalid
	}
	switch {
	case len(tes) == 1:
		if !httpcore.LowerEqualFold([]byte(tes[0]), "chunked") {
			return r, 0, errInvalid
		}
		lenient = false // chunked framing is checked strictly: CRLF after each chunk
		if r.body, err = readChunked(b, &p, line); err != nil {
			return r, 0, err
		}
	case len(cls) == 1:
		if len(cls[0]) == 0 || len(cls[0]) > 12 {
			return r, 0, errInvalid
		}
		for _, c := range []byte(cls[0]) {
			if c < '0' || c > '9' {
				return r, 0, errInvalid
			}
		}
		cl, _ := strconv.Atoi(cls[0])
		if len(b)-p < cl {
			return r, 0, errIncomplete
		}
		r.body = b[p : p+cl]
		p += cl
	}
	r.raw = b[:p]
	return r, p, nil
}

// readFields reads field lines up to the blank line, calling f with each name and value.
func readFields(line func() ([]byte, error), f func(name, value []byte)) error {
	for {
		l, err := line()
		if err != nil {
			return err
		}
		if len(l) == 0 {
			return nil
		}
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 || !httpcore.IsToken(l[:colon]) {
			return errInvalid // includes obs-fold: a line starting with SP or HT
		}
		v := bytes.Trim(l[colon+1:], " \t")
		for _, c := range v {
			if c < ' ' && c != '\t' || c == 0x7f {
				return errInvalid
			}
		}
		f(l[:colon], v)
	}
}

// readChunked reads a chunked body (RFC 9112 §7.1) starting at *p, trailers included.
func readChunked(b []byte, p *int, line func() ([]byte, error)) ([]byte, error) {
	var body []byte
	for {
		l, err := line()
		if err != nil {
			return nil, err
		}
		size := l
		if i := bytes.IndexByte(l, ';'); i >= 0 {
			size = bytes.TrimRight(l[:i], " \t")
		}
		if len(size) == 0 || len(size) > 15 {
			return nil, errInvalid
		}
		n, err := strconv.ParseUint(string(size), 16, 64)
		if err != nil {
			return nil, errInvalid
		}
		if n == 0 {
			return body, readFields(line, func(_, _ []byte) {})
		}
		if uint64(len(b)-*p) < n+2 {
			return nil, errIncomplete
		}
		body = append(body, b[*p:*p+int(n)]...)
		*p += int(n)
		if b[*p] != '\r' || b[*p+1] != '\n' {
			return nil, errInvalid
		}
		*p += 2
	}
}

// readAllStrict frames as many requests as b holds; err says why it stopped early.
func readAllStrict(b []byte, lenient bool) (reqs []strictReq, rest []byte, err error) {
	for len(b) > 0 {
		r, n, err := readStrict(b, lenient)
		if err != nil {
			return reqs, b, err
		}
		reqs = append(reqs, r)
		b = b[n:]
	}
	return reqs, nil, nil
}

// rawBackend is a TCP server that records every byte it receives. It answers each request it
// can frame strictly with a fixed small response, and closes a connection on bytes it cannot
// frame. got holds, in the order received, each framed request followed by whatever could
// not be framed when its connection ended.
type rawBackend struct {
	ln      net.Listener
	mu      sync.Mutex
	got     []byte
	reqs    []strictReq
	pending map[net.Conn][]byte // connections that hold part of a request
	wg      sync.WaitGroup
}

const rawBackendResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func newRawBackend(t testing.TB) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{ln: ln, pending: make(map[net.Conn][]byte)}
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

func (rb *rawBackend) addr() string { return rb.ln.Addr().String() }

func (rb *rawBackend) accept() {
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

func (rb *rawBackend) serve(c net.Conn) {
	defer rb.wg.Done()
	defer c.Close()
	var buf []byte
	p := make([]byte, 64<<10)
	for {
		n, err := c.Read(p)
		buf = append(buf, p[:n]...)
		for len(buf) > 0 {
			r, m, ferr := readStrict(buf, false)
			if ferr == errIncomplete {
				break
			}
			rb.mu.Lock()
			if ferr != nil {
				rb.got = append(rb.got, buf...)
				delete(rb.pending, c)
				rb.mu.Unlock()
				return
			}
			r.raw = append([]byte(nil), r.raw...)
			r.body = append([]byte(nil), r.body...)
			rb.got = append(rb.got, r.raw...)
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

// take waits until no open connection holds part of a request (bounded: a proxy that leaves
// half a request on a connection it keeps open fails here) and returns and clears what was
// received.
func (rb *rawBackend) take(t testing.TB) ([]byte, []strictReq) {
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

// exchangeRaw writes raw on a fresh connection to addr, half-closes it and returns everything
// the proxy answered up to its close (bounded by a 10 s deadline).
func exchangeRaw(t testing.TB, addr string, raw []byte) []byte {
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
