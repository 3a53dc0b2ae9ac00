//go:build linux

package h1

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
)

// fakeH2 is an HTTP/2 backend written frame by frame (x/net's Framer), for what a real server
// does only by chance: a GOAWAY in the middle of streams, a window that never opens. serve
// runs per connection (n counts from 1) after the preface and SETTINGS were exchanged.
func fakeH2(t *testing.T, settings []http2.Setting, serve func(n int, c *fakeH2Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
					return
				}
				c := &fakeH2Conn{nc: nc, fr: http2.NewFramer(nc, br)}
				c.enc = hpack.NewEncoder(&c.eb)
				c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				_ = c.fr.WriteSettings(settings...)
				serve(int(n.Add(1)), c)
			}()
		}
	}()
	return ln.Addr().String()
}

type fakeH2Conn struct {
	noPing bool // PINGs go unanswered (a backend that vanished without a FIN)
	nc     net.Conn
	fr     *http2.Framer
	mu     sync.Mutex
	enc    *hpack.Encoder
	eb     bytes.Buffer
}

// next returns the next frame, answering SETTINGS and PING on the way.
func (c *fakeH2Conn) next() (http2.Frame, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.mu.Lock()
				_ = c.fr.WriteSettingsAck()
				c.mu.Unlock()
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() && !c.noPing {
				c.mu.Lock()
				_ = c.fr.WritePing(true, f.Data)
				c.mu.Unlock()
			}
			continue
		}
		return f, nil
	}
}

// answer sends a 200 with body on stream id.
func (c *fakeH2Conn) answer(id uint32, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eb.Reset()
	_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.eb.Bytes(), EndHeaders: true})
	_ = c.fr.WriteData(id, true, []byte(body))
}

// A backend's GOAWAY in the middle of streams: the streams above its last-stream-id were
// never processed and go out again on a new connection, whatever their method (no request
// lost); a stream it processed and then lost with the connection is sent again only if it
// is idempotent: the POST gets 502, the GET is retried.
func TestH2BackendGoAway(t *testing.T) {
	var mu sync.Mutex
	seen := map[int][]string{} // connection → "METHOD path" in stream order
	addr := fakeH2(t, []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 100}}, func(n int, c *fakeH2Conn) {
		var ids []uint32
		for {
			f, err := c.next()
			if err != nil {
				return
			}
			h, ok := f.(*http2.MetaHeadersFrame)
			if !ok {
				continue
			}
			mu.Lock()
			seen[n] = append(seen[n], h.PseudoValue("method")+" "+h.PseudoValue("path"))
			mu.Unlock()
			if n > 1 {
				c.answer(h.StreamID, "again:"+h.PseudoValue("path"))
				continue
			}
			ids = append(ids, h.StreamID)
			if len(ids) < 4 {
				continue
			}
			// Four streams on the first connection: the first two processed, the others not.
			c.mu.Lock()
			_ = c.fr.WriteGoAway(ids[1], http2.ErrCodeNo, nil)
			c.mu.Unlock()
			c.answer(ids[0], "first")
			time.Sleep(50 * time.Millisecond)
			return // the second processed stream is lost with the connection
		}
	})
	cfg := testConfig(h2cPool("p", addr))
	cfg.Pools[0].Retries.Attempts = 3
	t.Setenv("BALLAST_H1_SHARDS", "1") // one shard: one connection to the backend
	te := startEngine(t, cfg)
	// The first request opens the connection alone (one stream before the backend's
	// SETTINGS); the next three join it.
	type result struct {
		status int
		body   string
	}
	paths := []string{"/1", "/2", "/3", "/4"}
	methods := map[string]string{"/1": "GET", "/2": "POST", "/3": "POST", "/4": "GET"}
	results := make([]result, len(paths))
	var wg sync.WaitGroup
	c := testClient()
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(methods[p], te.url(p), strings.NewReader("b"))
			resp, err := c.Do(req)
			if err != nil {
				results[i] = result{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results[i] = result{resp.StatusCode, string(b)}
		}()
		if i == 0 {
			waitFor(t, "the first stream", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen[1]) == 1 })
		}
	}
	wg.Wait()
	mu.Lock()
	first := append([]string(nil), seen[1]...)
	mu.Unlock()
	if len(first) != 4 {
		t.Fatalf("first connection saw %v, want 4 streams", first)
	}
	pathOf := func(s string) string { return s[strings.IndexByte(s, ' ')+1:] }
	for i, p := range paths {
		r := results[i]
		pos := -1
		for k, s := range first {
			if pathOf(s) == p {
				pos = k
			}
		}
		switch {
		case pos == 0:
			if r.status != 200 || r.body != "first" {
				t.Errorf("%s (answered before the GOAWAY): %d %q", p, r.status, r.body)
			}
		case pos == 1 && methods[p] == "POST":
			if r.status != 502 {
				t.Errorf("%s (POST processed, then lost): %d %q, want 502 (not replayed)", p, r.status, r.body)
			}
		default: // refused (never processed), or an idempotent one lost: sent again
			if r.status != 200 || r.body != "again:"+p {
				t.Errorf("%s (position %d on the first connection, %s): %d %q, want it sent again", p, pos, methods[p], r.status, r.body)
			}
		}
	}
	if st := te.H2BackendStats(); st.Refused < 2 || st.GoAways < 1 {
		t.Errorf("refused %d, GOAWAYs %d: want the two streams above last-stream-id refused", st.Refused, st.GoAways)
	}
}

// A backend that never opens its window (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE):
// the request body waits, at most one read of it held on the shard (the client's writes
// block), until timeouts.response ends the attempt: the client gets 504, the stream is reset
// and the connection is not the worse for it.
func TestH2BackendZeroWindow(t *testing.T) {
	var resets atomic.Int64
	addr := fakeH2(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}}, func(n int, c *fakeH2Conn) {
		for {
			f, err := c.next()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				if f.PseudoValue("method") == "GET" {
					c.answer(f.StreamID, "small")
				}
			case *http2.RSTStreamFrame:
				resets.Add(1)
			}
		}
	})
	cfg := testConfig(h2cPool("p", addr))
	cfg.Pools[0].Timeouts.Response = dur(time.Second)
	cfg.Pools[0].Retries.Attempts = 1
	t.Setenv("BALLAST_H1_SHARDS", "1")
	te := startEngine(t, cfg)
	nc, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body := 64 << 20
	go func() {
		fmt.Fprintf(nc, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", body)
		_, _ = nc.Write(make([]byte, body))
	}()
	_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 504 {
		t.Errorf("status %d, want 504 (timeouts.response)", resp.StatusCode)
	}
	waitFor(t, "the stream's reset at the backend", func() bool { return resets.Load() == 1 })
	// The connection serves on.
	r2, b := get(t, testClient(), "GET", te.url("/small"), nil, nil)
	if r2.StatusCode != 200 || string(b) != "small" {
		t.Errorf("after the stall: %d %q", r2.StatusCode, b)
	}
	if st := te.H2BackendStats(); st.Connects != 1 {
		t.Errorf("%d connections opened, want the first one kept", st.Connects)
	}
}

// 64 MiB through a backend stream each way, over each plane: an upload the backend digests,
// a download the client digests, and (HTTP/2 clients: full duplex) an echo streaming both
// ways at once, all within the windows.
func TestH2BackendLarge(t *testing.T) {
	for _, kind := range []string{config.BackendH2C, config.BackendH2} {
		t.Run(kind, func(t *testing.T) { testH2BackendLarge(t, kind) })
	}
}

func testH2BackendLarge(t *testing.T, kind string) {
	const size = 64 << 20
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	h := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil)[:8])
		case "/down":
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/echo":
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			_, _ = io.Copy(w, r.Body)
		}
	}
	var pool config.Pool
	if kind == config.BackendH2 {
		pool = h2TLSPool("p", newTLSBackend(t, h, nil))
	} else {
		addr, _ := h2cBackend(t, h, nil)
		pool = h2cPool("p", addr)
	}
	te, _ := h2cEngine(t, testConfig(pool), nil)
	want := sha256.New()
	for sent := 0; sent < size; sent += len(chunk) {
		want.Write(chunk)
	}
	wantSum := fmt.Sprintf("%x", want.Sum(nil)[:8])
	source := func() io.Reader {
		rs := make([]io.Reader, size/len(chunk))
		for i := range rs {
			rs[i] = bytes.NewReader(chunk)
		}
		return io.MultiReader(rs...)
	}
	for _, plane := range []struct {
		name   string
		client *http.Client
	}{{"http1", testClient()}, {"h2c", h2cClient()}} {
		plane.client.Timeout = 5 * time.Minute // 64 MiB under -race on a busy machine
		t.Run(plane.name+"/up", func(t *testing.T) {
			req, _ := http.NewRequest("POST", te.url("/up"), source())
			req.ContentLength = size
			resp, err := plane.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := fmt.Sprintf("%d %s", size, wantSum); string(b) != got {
				t.Errorf("backend got %q, want %q", b, got)
			}
		})
		paths := []string{"/down"}
		if plane.name == "h2c" {
			paths = append(paths, "/echo")
		}
		for _, p := range paths {
			t.Run(plane.name+p, func(t *testing.T) {
				var body io.Reader
				method := "GET"
				if p == "/echo" {
					method, body = "POST", source()
				}
				req, _ := http.NewRequest(method, te.url(p), body)
				resp, err := plane.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				n, err := io.Copy(h, resp.Body)
				resp.Body.Close()
				if err != nil || n != size || fmt.Sprintf("%x", h.Sum(nil)[:8]) != wantSum {
					t.Errorf("%d bytes (%v), digest %x, want %d, %s", n, err, h.Sum(nil)[:8], size, wantSum)
				}
			})
		}
	}
}

// A client that does not read its response stops the backend's stream: the engine holds at
// most the stream's window of it (given back only as the client takes it), so the backend's
// writes block at about that plus the sockets' buffers, far below the 64 MiB it would send;
// once the client reads, all of it arrives.
func TestH2BackendSlowClient(t *testing.T) {
	const size = 64 << 20
	var written atomic.Int64
	chunk := make([]byte, 16<<10)
	addr, _ := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
		}
	}, nil)
	te := startEngine(t, testConfig(h2cPool("p", addr)))
	nc, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10)
	}
	fmt.Fprintf(nc, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	// Let the backend write as much as it can while nothing is read.
	var last int64
	for i := 0; i < 50; i++ {
		time.Sleep(40 * time.Millisecond)
		if n := written.Load(); n == last && n > 0 {
			break
		} else {
			last = n
		}
	}
	if n := written.Load(); n > 16<<20 {
		t.Fatalf("the backend wrote %d bytes to a client that read nothing: no backpressure", n)
	}
	t.Logf("the backend stopped after %d bytes of %d", written.Load(), size)
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != size {
		t.Fatalf("read %d of %d: %v", n, size, err)
	}
}

// An idle connection to a backend that stopped answering (no FIN: its PINGs go unanswered)
// is found out: a PING after half of timeouts.idle of silence, the connection closed when
// nothing comes back within timeouts.connect (counted), and the next request gets a new one.
func TestH2BackendPingTimeout(t *testing.T) {
	var conns atomic.Int64
	addr := fakeH2(t, nil, func(n int, c *fakeH2Conn) {
		conns.Add(1)
		for {
			f, err := c.next()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				c.answer(h.StreamID, "ok")
				c.noPing = n == 1 // the first connection goes silent after its answer
			}
		}
	})
	cfg := testConfig(h2cPool("p", addr))
	// PING after 1 s of silence, given up 300 ms later: before the idle close at 2 s.
	cfg.Pools[0].Timeouts.Idle = dur(2 * time.Second)
	cfg.Pools[0].Timeouts.Connect = dur(300 * time.Millisecond)
	t.Setenv("BALLAST_H1_SHARDS", "1")
	te := startEngine(t, cfg)
	if r, b := get(t, testClient(), "GET", te.url("/a"), nil, nil); r.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("%d %q", r.StatusCode, b)
	}
	waitFor(t, "the PING timeout", func() bool {
		st := te.H2BackendStats()
		return st.Mux.PingTimeouts == 1 && st.Conns == 0
	})
	if r, b := get(t, testClient(), "GET", te.url("/b"), nil, nil); r.StatusCode != 200 || string(b) != "ok" || conns.Load() != 2 {
		t.Fatalf("after: %d %q, %d connections", r.StatusCode, b, conns.Load())
	}
}

// A gRPC response broken off by its backend after the head (the connection closed in the
// middle of the stream) ends with grpc-status UNAVAILABLE in trailers, not a reset: the
// client sees why.
func TestH2BackendGRPCBroken(t *testing.T) {
	addr := fakeH2(t, nil, func(n int, c *fakeH2Conn) {
		for {
			f, err := c.next()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				c.mu.Lock()
				c.eb.Reset()
				_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				_ = c.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
				_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: c.eb.Bytes(), EndHeaders: true})
				_ = c.fr.WriteData(h.StreamID, false, []byte{0, 0, 0, 0, 1, 'x'})
				c.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				return // the connection closes mid-stream
			}
		}
	})
	te, _ := h2cEngine(t, testConfig(h2cPool("p", addr)), nil)
	req, _ := http.NewRequest("POST", te.url("/svc.S/M"), strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(b, []byte{0, 0, 0, 0, 1, 'x'}) {
		t.Fatalf("body %q, %v: want the message that came, then the trailers", b, err)
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "14" || !strings.Contains(resp.Trailer.Get("Grpc-Message"), "broken") {
		t.Errorf("trailers %v, want grpc-status 14 (backend stream broken)", resp.Trailer)
	}
}
