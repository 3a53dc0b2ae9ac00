package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestSniffPreface(t *testing.T) {
	preface := string(http2Preface)
	tests := []struct {
		name, in string
		h2       bool
		err      bool
	}{
		{"HTTP/2 preface", preface + "\x00\x00\x00\x04", true, false},
		{"GET", "GET / HTTP/1.1\r\n", false, false},
		{"POST shares the P", "POST / HTTP/1.1\r\n", false, false},
		{"PRI with HTTP/1.1", "PRI * HTTP/1.1\r\n\r\n", false, false},
		{"empty lines first", "\r\nGET / HTTP/1.0\r\n", false, false},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", false, false},
		{"preface cut short", preface[:10], false, false},
		{"nothing", "", false, true},
		{"invalid preface (h2spec 3.5)", "INVALID CONNECTION PREFACE\r\n\r\n", false, true},
		{"no version", "GET /\r\n", false, true},
	}
	for _, tt := range tests {
		for _, chunked := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tt.in)
			if chunked {
				r = iotest.OneByteReader(r)
			}
			prefix, h2, err := sniffPreface(r, 8192)
			if (err != nil) != tt.err || h2 != tt.h2 || !strings.HasPrefix(tt.in, string(prefix)) {
				t.Errorf("%s (one byte at a time: %v): prefix %q h2 %v err %v; want h2 %v err %v", tt.name, chunked, prefix, h2, err, tt.h2, tt.err)
			}
		}
	}
}

// FuzzSniffPreface: whatever the bytes and however they arrive, the prefix returned is what was
// read (so replaying it loses nothing), h2 means exactly the whole preface, and an error means
// nothing came or the first line is no HTTP/1 request line.
func FuzzSniffPreface(f *testing.F) {
	f.Add([]byte(http2Preface), uint8(3))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), uint8(1))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nXX"), uint8(5))
	f.Add([]byte("INVALID CONNECTION PREFACE\r\n\r\n"), uint8(7))
	f.Add([]byte{}, uint8(0))
	const maxLine = 64
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		r := &chunkReader{data: in, n: int(chunk%8) + 1}
		prefix, h2, err := sniffPreface(r, maxLine)
		if err != nil {
			if len(in) == 0 {
				return
			}
			line, _, ok := bytes.Cut(bytes.TrimLeft(in, "\r\n"), []byte("\n"))
			if !ok || requestLine(bytes.TrimSuffix(line, []byte("\r"))) {
				t.Fatalf("error %v for %q", err, in)
			}
			return
		}
		if !bytes.HasPrefix(in, prefix) || len(prefix) > max(len(http2Preface), maxLine+8) {
			t.Fatalf("prefix %q is not what was read from %q", prefix, in)
		}
		if h2 != (len(in) >= len(http2Preface) && bytes.Equal(in[:len(http2Preface)], http2Preface)) {
			t.Fatalf("h2 %v for %q", h2, in)
		}
		rest, _ := io.ReadAll(r)
		if !bytes.Equal(append(append([]byte{}, prefix...), rest...), in) {
			t.Fatalf("prefix + rest != input")
		}
	})
}

type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(r.n, len(p), len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// On an h2c listener, HTTP/1 requests whose first bytes look like the preface's pass to the
// HTTP/1 plane intact: the backend receives exactly the request line and the client's fields.
// A connection that sends the HTTP/2 preface with an HTTP/1 version is refused by HTTP/1.
func TestH2CListenerRawHTTP1(t *testing.T) {
	got := make(chan string, 4)
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
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					var head strings.Builder
					for line != "\r\n" {
						head.WriteString(line)
						if line, err = br.ReadString('\n'); err != nil {
							return
						}
					}
					got <- head.String()
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}(c)
		}
	}()
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: h2c, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, backends: [{address: %s}]}]
`, ln.Addr()))
	addr := s.Addr("h2c").String()
	tests := []struct {
		name, req, status, backendLine string
	}{
		{"GET", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK", "GET /a HTTP/1.1\r\n"},
		{"PUT, shares the P", "PUT /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 200 OK", "PUT /p HTTP/1.1\r\n"},
		{"PRI with an HTTP/1 version", "PRI * HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 Bad Request", ""},
	}
	for _, tt := range tests {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, tt.req)
		status, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || strings.TrimSpace(status) != tt.status {
			t.Errorf("%s: status %q (%v), want %q", tt.name, status, err, tt.status)
			continue
		}
		if tt.backendLine == "" {
			select {
			case h := <-got:
				t.Errorf("%s: the backend got %q", tt.name, h)
			default:
			}
			continue
		}
		select {
		case h := <-got:
			if !strings.HasPrefix(h, tt.backendLine) || !strings.Contains(h, "Host: x\r\n") {
				t.Errorf("%s: the backend got %q", tt.name, h)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: nothing reached the backend", tt.name)
		}
	}
}
