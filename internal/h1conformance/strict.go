package h1conformance

import (
	"bytes"
	"errors"
	"strconv"

	"ballast/httpcore"
)

// An HTTP/1.1 request framer written from RFC 9112 independently of fasthttp and of both
// engines: the reference the table's raw backend and the fuzz targets check forwarded bytes
// against.

var (
	ErrIncomplete = errors.New("incomplete request")
	ErrInvalid    = errors.New("invalid request")
)

// Request is one request as the reference framer understood it.
type Request struct {
	Method, Target, Proto string
	Hosts                 []string
	Body                  []byte // after removing chunked framing
	Raw                   []byte // the wire bytes of the whole request
}

// ReadStrict frames one request at the start of b. lenient accepts a bare LF as a line end in
// the head (a recipient MAY, RFC 9112 §2.2), which is what a client may send; a backend is
// read without it, so that what Ballast writes must be CRLF throughout. Obs-fold, a field
// name that is not a token, control characters, duplicate or malformed Content-Length,
// Transfer-Encoding other than a single "chunked", Transfer-Encoding with Content-Length
// or in HTTP/1.0 are all invalid.
func ReadStrict(b []byte, lenient bool) (r Request, n int, err error) {
	p := 0
	line := func() ([]byte, error) {
		i := bytes.IndexByte(b[p:], '\n')
		if i < 0 {
			return nil, ErrIncomplete
		}
		l := b[p : p+i]
		p += i + 1
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		} else if !lenient {
			return nil, ErrInvalid
		}
		if bytes.IndexByte(l, '\r') >= 0 {
			return nil, ErrInvalid
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
		return r, 0, ErrInvalid
	}
	for _, c := range parts[1] {
		if c <= ' ' || c >= 0x7f {
			return r, 0, ErrInvalid
		}
	}
	r.Method, r.Target, r.Proto = string(parts[0]), string(parts[1]), string(parts[2])
	if r.Proto != "HTTP/1.1" && r.Proto != "HTTP/1.0" {
		return r, 0, ErrInvalid
	}
	var cls, tes []string
	if err = readFields(line, func(name, value []byte) {
		switch {
		case httpcore.LowerEqualFold(name, "host"):
			r.Hosts = append(r.Hosts, string(value))
		case httpcore.LowerEqualFold(name, "content-length"):
			cls = append(cls, string(value))
		case httpcore.LowerEqualFold(name, "transfer-encoding"):
			tes = append(tes, string(value))
		}
	}); err != nil {
		return r, 0, err
	}
	if len(r.Hosts) > 1 || len(cls) > 1 || len(tes) > 1 || len(tes) == 1 && (len(cls) > 0 || r.Proto == "HTTP/1.0") {
		return r, 0, ErrInvalid
	}
	switch {
	case len(tes) == 1:
		if !httpcore.LowerEqualFold([]byte(tes[0]), "chunked") {
			return r, 0, ErrInvalid
		}
		lenient = false // chunked framing is checked strictly: CRLF after each chunk
		if r.Body, err = readChunked(b, &p, line); err != nil {
			return r, 0, err
		}
	case len(cls) == 1:
		if len(cls[0]) == 0 || len(cls[0]) > 12 {
			return r, 0, ErrInvalid
		}
		for _, c := range []byte(cls[0]) {
			if c < '0' || c > '9' {
				return r, 0, ErrInvalid
			}
		}
		cl, _ := strconv.Atoi(cls[0])
		if len(b)-p < cl {
			return r, 0, ErrIncomplete
		}
		r.Body = b[p : p+cl]
		p += cl
	}
	r.Raw = b[:p]
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
			return ErrInvalid // includes obs-fold: a line starting with SP or HT
		}
		v := bytes.Trim(l[colon+1:], " \t")
		for _, c := range v {
			if c < ' ' && c != '\t' || c == 0x7f {
				return ErrInvalid
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
			return nil, ErrInvalid
		}
		n, err := strconv.ParseUint(string(size), 16, 64)
		if err != nil {
			return nil, ErrInvalid
		}
		if n == 0 {
			return body, readFields(line, func(_, _ []byte) {})
		}
		if uint64(len(b)-*p) < n+2 {
			return nil, ErrIncomplete
		}
		body = append(body, b[*p:*p+int(n)]...)
		*p += int(n)
		if b[*p] != '\r' || b[*p+1] != '\n' {
			return nil, ErrInvalid
		}
		*p += 2
	}
}

// ReadAllStrict frames as many requests as b holds; err says why it stopped early.
func ReadAllStrict(b []byte, lenient bool) (reqs []Request, rest []byte, err error) {
	for len(b) > 0 {
		r, n, err := ReadStrict(b, lenient)
		if err != nil {
			return reqs, b, err
		}
		reqs = append(reqs, r)
		b = b[n:]
	}
	return reqs, nil, nil
}
