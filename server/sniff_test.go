package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// On an h2c listener, HTTP/1 requests whose first bytes look like the preface's are served as
// HTTP/1.1 intact: the backend receives exactly the request line and the client's fields. A
// connection that sends the HTTP/2 preface with an HTTP/1 version gets 400. (The engine's
// sniffing itself, whole and in pieces: h1's TestH2CSniffRaw and FuzzH2CRequestHead.)
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
