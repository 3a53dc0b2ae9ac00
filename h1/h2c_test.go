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
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
	"ballast/h2mux"
)

// h2cEngine serves cfg's listener as an h2c one (HTTP/2 with prior knowledge beside HTTP/1.1)
// with the Conn settings mux gives; it returns the engine and the counters its Conns add to.
func h2cEngine(t testing.TB, cfg *config.Config, mux func(*h2mux.Config)) (*testEngine, *h2mux.Counters) {
	t.Helper()
	cfg.Listeners[0].H2C = true
	ctr := new(h2mux.Counters)
	te := startEngineWith(t, cfg, func(e *Engine) {
		e.SetHTTP2(func(l *config.Listener) h2mux.Config {
			c := h2mux.Config{
				MaxConcurrentStreams: 100, StreamWindow: 1 << 20, ConnWindow: 4 << 20,
				MaxHeaderListSize: l.MaxHeaderBytes, ResetBurst: 200, IdleTimeout: l.IdleTimeout.Duration,
			}
			if mux != nil {
				mux(&c)
			}
			return c
		}, ctr)
	})
	return te, ctr
}

// h2cClient is an HTTP/2 client with prior knowledge.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p, DisableCompression: true}}
}

// echoBackend answers with what it got: method, target, the body's framing and digest, the
// cookie and trailer fields.
func echoBackend(t *testing.T) string { return httpBackend(t, echoHandler) }

// echoHandler is echoBackend's handler.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	{
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		te := strings.Join(r.TransferEncoding, ",")
		w.Header().Set("X-Echo", fmt.Sprintf("%s %s cl=%d te=%s n=%d cookie=%q trailer=%q proto=%s",
			r.Method, r.RequestURI, r.ContentLength, te, n, r.Header.Get("Cookie"), r.Trailer.Get("X-Sum"), r.Header.Get("X-Forwarded-Proto")))
		w.Header().Set("X-Digest", fmt.Sprintf("%x", h.Sum(nil)[:8]))
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // a chunked response
		}
		if big := r.URL.Path == "/trailers-big"; big || r.URL.Path == "/trailers" {
			w.Header().Set("Trailer", "X-Resp-Sum, Grpc-Status")
			w.(http.Flusher).Flush()
			if big { // more than the client's initial windows: the trailers wait for the DATA
				io.WriteString(w, strings.Repeat("y", 1<<20))
			}
			io.WriteString(w, "body:"+r.URL.Path)
			w.Header().Set("X-Resp-Sum", "7")
			w.Header().Set("Grpc-Status", "0")
			return
		}
		io.WriteString(w, "body:"+r.URL.Path)
	}
}

// Requests over HTTP/2 with prior knowledge, served on the shards, reach an HTTP/1.1 backend
// as HTTP/1.1 requests: bodies with and without a length (chunked to the backend, trailers
// with them), cookie crumbs joined, HEAD, responses with a length and chunked ones, and the
// core's own answers.
func TestH2CRequests(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", echoBackend(t)))
	cfg.Routes = append([]config.Route{{PathPrefix: "/none/", Pool: "down"}}, cfg.Routes...)
	cfg.Pools = append(cfg.Pools, testPool("down", "roundrobin", "127.0.0.1:1"))
	cfg.Pools[1].Retries.Attempts = 1
	te, ctr := h2cEngine(t, cfg, nil)
	c := h2cClient()
	digest := func(b string) string { s := sha256.Sum256([]byte(b)); return fmt.Sprintf("%x", s[:8]) }
	body := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name, method, path string
		body               io.Reader
		trailer            http.Header
		respTrailer        http.Header
		hdr                map[string][]string
		status             int
		echo, respBody     string
		digest             string
	}{
		{name: "get", method: "GET", path: "/a?b=1", status: 200, echo: `GET /a?b=1 cl=0 te= n=0 cookie="" trailer="" proto=http`, respBody: "body:/a"},
		{name: "head", method: "HEAD", path: "/h", status: 200, echo: `HEAD /h cl=0 te= n=0`},
		{name: "cookies joined", method: "GET", path: "/c", hdr: map[string][]string{"Cookie": {"a=1", "b=2"}}, status: 200, echo: `cookie="a=1; b=2"`},
		{name: "body with length", method: "POST", path: "/p", body: strings.NewReader(body), status: 200,
			echo: fmt.Sprintf("POST /p cl=%d te= n=%d", len(body), len(body)), digest: digest(body)},
		{name: "body without length", method: "PUT", path: "/u", body: io.MultiReader(strings.NewReader(body[:1000]), strings.NewReader(body[1000:])),
			status: 200, echo: fmt.Sprintf("PUT /u cl=-1 te=chunked n=%d", len(body)), digest: digest(body)},
		{name: "trailers", method: "POST", path: "/t", body: io.MultiReader(strings.NewReader("abc")), trailer: http.Header{"X-Sum": {"42"}},
			status: 200, echo: `POST /t cl=-1 te=chunked n=3 cookie="" trailer="42"`, digest: digest("abc")},
		{name: "chunked response", method: "GET", path: "/chunked", status: 200, respBody: "body:/chunked"},
		{name: "response trailers", method: "GET", path: "/trailers", status: 200, respBody: "body:/trailers",
			respTrailer: http.Header{"X-Resp-Sum": {"7"}, "Grpc-Status": {"0"}}},
		{name: "response trailers after 1 MiB", method: "GET", path: "/trailers-big", status: 200, respBody: strings.Repeat("y", 1<<20) + "body:/trailers-big",
			respTrailer: http.Header{"X-Resp-Sum": {"7"}, "Grpc-Status": {"0"}}},
		{name: "backend down", method: "GET", path: "/none/x", status: 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, te.url(tc.path), tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != nil && tc.name != "body with length" {
				req.ContentLength = -1 // unknown: DATA frames without content-length
			}
			req.Trailer = tc.trailer
			for k, vv := range tc.hdr {
				for _, v := range vv {
					req.Header.Add(k, v)
				}
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 || resp.StatusCode != tc.status {
				t.Fatalf("%s %d, want HTTP/2 %d (body %q)", resp.Proto, resp.StatusCode, tc.status, b)
			}
			if got := resp.Header.Get("X-Echo"); !strings.Contains(got, tc.echo) {
				t.Errorf("backend saw %q, want it to contain %q", got, tc.echo)
			}
			if tc.digest != "" && resp.Header.Get("X-Digest") != tc.digest {
				t.Errorf("body digest %s at the backend, want %s", resp.Header.Get("X-Digest"), tc.digest)
			}
			if tc.respBody != "" && string(b) != tc.respBody {
				t.Errorf("body %q, want %q", b, tc.respBody)
			}
			for k, v := range tc.respTrailer {
				if got := resp.Trailer.Values(k); len(got) != 1 || got[0] != v[0] {
					t.Errorf("trailer %s: %q, want %q (trailers %v)", k, got, v, resp.Trailer)
				}
			}
			if tc.respTrailer == nil && len(resp.Trailer) > 0 {
				t.Errorf("trailers %v on a response without them", resp.Trailer)
			}
			if len(resp.Header.Values("Connection"))+len(resp.Header.Values("Transfer-Encoding")) > 0 {
				t.Errorf("connection-specific fields in an HTTP/2 response: %v", resp.Header)
			}
		})
	}
	if n := ctr.Streams.Load(); n < 8 {
		t.Errorf("the engine's Conns counted %d streams, want at least 8", n)
	}
	if ctr.ResponseFieldsDropped.Load() != 0 {
		t.Errorf("%d response fields dropped by h2mux: the engine should leave connection-specific ones out itself", ctr.ResponseFieldsDropped.Load())
	}
	// HTTP/1.1 on the same listener is served as before.
	resp, b := get(t, testClient(), "GET", te.url("/one"), nil, nil)
	if resp.ProtoMajor != 1 || resp.StatusCode != 200 || string(b) != "body:/one" {
		t.Errorf("HTTP/1.1 on the h2c listener: %s %d %q", resp.Proto, resp.StatusCode, b)
	}
}

// Streams and connections have no goroutine of their own: 100 connections with a stream each
// waiting for a backend that holds them leave the goroutine count where it was.
func TestH2CNoGoroutinePerStream(t *testing.T) {
	// The backend holds every connection in one goroutine, answering them all on release.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan net.Conn, 200)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	backend := ln.Addr().String()
	te, _ := h2cEngine(t, testConfig(testPool("p", "roundrobin", backend)), nil)
	p := te.pools["p"]
	const n = 100
	conns := make([]*rawH2, n)
	for i := range conns {
		conns[i] = dialH2(t, te.addr)
	}
	runtime.GC()
	before := runtime.NumGoroutine()
	for _, r := range conns {
		r.get(t, 1, "/hold")
	}
	waitFor(t, "every stream at the backend", func() bool { return inflight(p) == n })
	during := runtime.NumGoroutine() - before
	for range n {
		c := <-held
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		defer c.Close()
	}
	for _, r := range conns {
		if st, body := r.response(t, 1); st != "200" || body != "ok" {
			t.Fatalf("response %s %q", st, body)
		}
	}
	if during > 10 { // the runtime's own come and go
		t.Errorf("%d goroutines more with %d streams in flight, want none per stream or connection", during, n)
	}
	t.Logf("%d connections with a stream in flight each: %d goroutines more", n, during)
}

// A client that grants no window holds its stream for StallTimeout at most: the stream is
// reset (counted), its backend connection closed and its slot released; the connection and
// its other streams go on.
func TestH2CZeroWindowStall(t *testing.T) {
	big := strings.Repeat("z", 256<<10)
	backend := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "small")
	})
	te, ctr := h2cEngine(t, testConfig(testPool("p", "roundrobin", backend)), func(c *h2mux.Config) {
		c.StallTimeout = 300 * time.Millisecond
	})
	r := dialH2With(t, te.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.get(t, 1, "/big")
	var reset bool
	if err := r.readUntil(func(f http2.Frame) bool {
		rst, ok := f.(*http2.RSTStreamFrame)
		reset = ok && rst.StreamID == 1
		return reset
	}); err != nil || !reset {
		t.Fatalf("no RST_STREAM for the stalled stream: %v", err)
	}
	if ctr.StallResets.Load() != 1 {
		t.Errorf("StallResets %d, want 1", ctr.StallResets.Load())
	}
	waitFor(t, "the stalled stream's backend slot released", func() bool { return inflight(te.pools["p"]) == 0 })
	// The connection still serves (a window for the new stream).
	if err := r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535}); err != nil {
		t.Fatal(err)
	}
	r.get(t, 3, "/small")
	if st, body := r.response(t, 3); st != "200" || body != "small" {
		t.Errorf("after the stall: %s %q", st, body)
	}
}

// A request body that comes more slowly than the backend's timeouts.connect (over HTTP/1.1
// here; HTTP/2 bodies come frame by frame) is streamed to a new backend connection, not failed
// as a connect timeout.
func TestSlowBodyAfterConnect(t *testing.T) {
	pc := testPool("p", "roundrobin", echoBackend(t))
	pc.Timeouts.Connect = dur(200 * time.Millisecond)
	te := startEngine(t, testConfig(pc))
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
	time.Sleep(600 * time.Millisecond) // three connect timeouts: the body's rest comes late
	fmt.Fprintf(c, "3\r\ndef\r\n0\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("X-Echo"), "n=6") {
		t.Errorf("%d %q (echo %q), want 200 with the 6 body bytes at the backend", resp.StatusCode, b, resp.Header.Get("X-Echo"))
	}
}

// rawH2 is an HTTP/2 client connection on x/net's Framer, for what the Transport hides.
type rawH2 struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	dec *hpack.Decoder
}

func dialH2(t *testing.T, addr string) *rawH2 { return dialH2With(t, addr) }

func dialH2With(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{c: c, fr: http2.NewFramer(c, c)}
	r.enc = hpack.NewEncoder(&r.buf)
	r.dec = hpack.NewDecoder(4096, nil)
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawH2) get(t *testing.T, id uint32, path string) {
	t.Helper()
	r.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
		_ = r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads frames (acknowledging SETTINGS) until f returns true or the connection ends.
func (r *rawH2) readUntil(f func(http2.Frame) bool) error {
	for {
		fr, err := r.fr.ReadFrame()
		if err != nil {
			return err
		}
		if s, ok := fr.(*http2.SettingsFrame); ok && !s.IsAck() {
			_ = r.fr.WriteSettingsAck()
		}
		if f(fr) {
			return nil
		}
	}
}

// response reads stream id's status and body (granting window as it goes).
func (r *rawH2) response(t *testing.T, id uint32) (status, body string) {
	t.Helper()
	var b strings.Builder
	err := r.readUntil(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamID == id {
				fields, _ := r.dec.DecodeFull(f.HeaderBlockFragment())
				for _, hf := range fields {
					if hf.Name == ":status" {
						status = hf.Value
					}
				}
				return f.StreamEnded()
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				b.Write(f.Data())
				if n := len(f.Data()); n > 0 {
					_ = r.fr.WriteWindowUpdate(0, uint32(n))
					_ = r.fr.WriteWindowUpdate(id, uint32(n))
				}
				return f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			return f.StreamID == id
		}
		return false
	})
	if err != nil {
		t.Fatalf("stream %d: %v", id, err)
	}
	return status, b.String()
}
