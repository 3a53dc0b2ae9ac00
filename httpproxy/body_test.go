package httpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRequestBodyTimeout is issue 8 item 10: a request body trickling in holds a backend slot
// no longer than the body timeout (listener.idle_timeout), whatever its framing: every 64 KiB
// of it must arrive within the timeout, so a byte every 100 ms against a 1.5 s timeout is cut
// (408, connection closed, slot freed) although no single gap comes near the timeout, while
// an upload that moves 64 KiB per 100 ms may take longer than the timeout in all.
func TestRequestBodyTimeout(t *testing.T) {
	var complete atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		complete.Add(1)
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(be.Close)

	// Longer than the second by which the old code moved the deadline on while bytes came,
	// which is how a trickle used to escape it; the trickles last four times as long.
	const bt = 1500 * time.Millisecond
	tests := []struct {
		name    string
		timeout time.Duration
		head    string // request head after the request line, without the blank line
		first   string // body bytes sent at once with the head
		piece   string // written every gap
		gap     time.Duration
		pieces  int  // at most; a trickle stops when the proxy answers
		held    bool // the request is forwarded (holds a slot) while its body trickles
		want    int  // status
	}{
		{"chunked trickle", bt, "Transfer-Encoding: chunked", "", "1\r\na\r\n", 100 * time.Millisecond, 60, true, 408},
		// fasthttp reads the first 8 KiB of a body with a length before the handler runs;
		// sent at once, they let the request reach a backend before the trickle starts.
		{"large content-length trickle", bt, "Content-Length: 1000000", strings.Repeat("a", 8<<10), "a", 100 * time.Millisecond, 60, true, 408},
		{"small content-length trickle", bt, "Content-Length: 1000", "", "a", 100 * time.Millisecond, 60, false, 408},
		{"long upload that keeps moving", bt, "Content-Length: 1966080", "", strings.Repeat("u", 64<<10), 100 * time.Millisecond, 30, true, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(testPool("b", "roundrobin", hostOf(be)))
			cfg.Listeners[0].IdleTimeout = dur(tc.timeout)
			tp := startProxy(t, cfg)
			before := complete.Load()
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\n"+tc.head+"\r\n\r\n"+tc.first); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				status int
				body   string
				err    error
			}
			answered := make(chan answer, 1)
			go func() {
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					answered <- answer{err: err}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answered <- answer{status: resp.StatusCode, body: string(b)}
			}()
			var got answer
			sent := 0
		trickle:
			for sent < tc.pieces {
				select {
				case got = <-answered:
					break trickle
				default:
				}
				if _, err := io.WriteString(c, tc.piece); err != nil {
					break // the proxy closed the connection; its answer is read below
				}
				sent++
				if sent == 2 && tc.held {
					waitFor(t, "the request to hold a backend slot", func() bool { return inflight(tp.pools["b"]) == 1 })
				}
				time.Sleep(tc.gap) // the client's pace, not a wait for the proxy
			}
			if got == (answer{}) {
				select {
				case got = <-answered:
				case <-time.After(10 * time.Second):
					t.Fatalf("no answer after %d pieces: the body was never cut", sent)
				}
			}
			if tc.want == 408 && sent >= tc.pieces {
				t.Fatalf("the whole trickle (%d pieces over %v) was taken in; answer %d %q", sent,
					time.Duration(sent)*tc.gap, got.status, got.body)
			}
			if got.err != nil {
				t.Fatalf("after %d pieces the client got no answer: %v", sent, got.err)
			}
			if got.status != tc.want {
				t.Fatalf("after %d pieces: %d %q, want %d", sent, got.status, got.body, tc.want)
			}
			if tc.want == 408 {
				// The connection is closed after the 408: the rest of the body is unread.
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if n, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatalf("connection still open after 408 (read %d bytes)", n)
				}
				if n := complete.Load() - before; n != 0 {
					t.Fatalf("the backend received %d complete bodies, want none", n)
				}
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["b"]) == 0 })
		})
	}
}

// refusingBackend answers POST /upload with 413 and Connection: close as soon as it has the
// request headers, without reading the body; on /crash it closes the connection without
// answering at that point; anything else gets 200 "next".
func refusingBackend(t *testing.T) (addr string, refused *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused = new(atomic.Int64)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/crash" {
						refused.Add(1)
						return
					}
					if req.URL.Path == "/upload" {
						refused.Add(1)
						_, _ = io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
				}
			}()
		}
	}()
	return ln.Addr().String(), refused
}

// TestEarlyResponseToUpload is issue 8 item 9: a backend that refuses a streamed upload after
// its headers (413, Connection: close) has its answer passed to the client, not a 502. If the
// client is still holding back most of the body, the client connection is closed after the
// 413 (the body cannot be drained); if the whole body is already there, it is drained and a
// request pipelined behind it is answered.
func TestEarlyResponseToUpload(t *testing.T) {
	addr, refused := refusingBackend(t)
	tests := []struct {
		name       string
		path       string
		length     int // Content-Length
		send       int // body bytes the client sends before it waits for the answer
		pipelined  bool
		wantStatus int
		wantBody   string
	}{
		// fasthttp reads the first 8 KiB of a body with a length before the handler runs.
		{"client waits with most of a large body unsent", "/upload", 10 << 20, 8 << 10, false, 413, "too large"},
		{"client keeps sending a large body", "/upload", 10 << 20, 10 << 20, false, 413, "too large"},
		{"whole body sent, request pipelined behind it", "/upload", 70000, 70000, true, 413, "too large"},
		{"backend dies after the headers, client waits", "/crash", 10 << 20, 8 << 10, false, 502, "ballast: backend closed the connection before responding\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(testPool("u", "roundrobin", addr))
			cfg.Listeners[0].IdleTimeout = dur(5 * time.Second) // the old code's failure ends sooner
			tp := startProxy(t, cfg)
			before := refused.Load()
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			msg := fmt.Sprintf("POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tc.length, strings.Repeat("b", tc.send))
			if tc.pipelined {
				msg += "GET /after HTTP/1.1\r\nHost: x\r\n\r\n"
			}
			go func() { _, _ = io.WriteString(c, msg) }() // may block on a full window; the reads below drain nothing of it
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || string(body) != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if n := refused.Load() - before; n != 1 {
				t.Fatalf("the backend refused %d uploads, want 1", n)
			}
			if tc.pipelined {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("pipelined request not answered: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "next" {
					t.Fatalf("pipelined request: %d %q", resp.StatusCode, body)
				}
			} else {
				if !resp.Close {
					t.Errorf("%d without Connection: close although the body stays unread", resp.StatusCode)
				}
				if n, err := br.ReadByte(); err == nil {
					t.Fatalf("connection still open after the %d (read %q)", resp.StatusCode, n)
				}
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["u"]) == 0 })
		})
	}
}
