//go:build linux

package h1

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	brotli "github.com/molecule-man/go-brrr"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
)

// zplane is one way a client reaches the engine: HTTP/1.1 or h2c, on the same h2c listener.
type zplane struct {
	name   string
	client *http.Client
}

func zplanes() []zplane {
	return []zplane{{"http1", testClient()}, {"h2c", h2cClient()}}
}

// decoder returns a reader of body decoded from enc ("" as it is).
func decoder(t testing.TB, enc string, body io.Reader) io.Reader {
	t.Helper()
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		return zr
	case "br":
		return brotli.NewReader(body)
	case "":
		return body
	}
	t.Fatalf("unknown Content-Encoding %q", enc)
	return nil
}

func decodeBody(t testing.TB, enc string, body []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(decoder(t, enc, bytes.NewReader(body)))
	if err != nil {
		t.Fatalf("decoding %s: %v", enc, err)
	}
	return out
}

var (
	zhtml = []byte(strings.Repeat("<p>hello compressible world</p>\n", 200)) // 6.4 KB
	zbig  = []byte(strings.Repeat("<li>a much longer streamed page</li>\n", 8000))
)

// compressBackend serves the pages of TestCompression.
func compressBackend(t testing.TB) string {
	return httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch strings.TrimPrefix(r.URL.Path, "/plain") {
		case "/html":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Etag", `"v1"`)
			h.Set("Content-Length", strconv.Itoa(len(zhtml)))
			_, _ = w.Write(zhtml)
		case "/chunked": // no length: chunked, in pieces
			h.Set("Content-Type", "text/html")
			for i := 0; i < len(zbig); i += 50000 {
				_, _ = w.Write(zbig[i:min(i+50000, len(zbig))])
				w.(http.Flusher).Flush()
			}
		case "/tiny":
			h.Set("Content-Type", "text/html")
			_, _ = w.Write(zhtml[:100])
		case "/png":
			h.Set("Content-Type", "image/png")
			_, _ = w.Write(zhtml)
		case "/notransform":
			h.Set("Content-Type", "text/html")
			h.Set("Cache-Control", "no-transform")
			_, _ = w.Write(zhtml)
		case "/pre":
			h.Set("Content-Type", "text/html")
			h.Set("Content-Encoding", "gzip")
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(zhtml)
			_ = zw.Close()
			_, _ = w.Write(b.Bytes())
		case "/range":
			h.Set("Content-Type", "text/html")
			h.Set("Content-Range", fmt.Sprintf("bytes 0-1999/%d", len(zhtml)))
			h.Set("Content-Length", "2000")
			w.WriteHeader(206)
			_, _ = w.Write(zhtml[:2000])
		case "/304":
			h.Set("Etag", `"v1"`)
			w.WriteHeader(304)
		}
	})
}

// compressConfig: /plain/ without compression, /close/ to a backend whose bodies end with
// its close, everything else compressed (br, then gzip; text/html from 1 KiB).
func compressConfig(addr, closeAddr string) *config.Config {
	cfg := testConfig(testPool("p", "roundrobin", addr), testPool("close", "roundrobin", closeAddr))
	cfg.Routes = []config.Route{
		{PathPrefix: "/plain/", Pool: "p"},
		{PathPrefix: "/close/", Pool: "close", RoutePolicy: config.RoutePolicy{Compress: &config.Compress{
			Types: config.DefaultCompressTypes, MinSize: 1024, Algorithms: []string{"br", "gzip"}}}},
		{Pool: "p", RoutePolicy: config.RoutePolicy{Compress: &config.Compress{
			Types: config.DefaultCompressTypes, MinSize: 1024, Algorithms: []string{"br", "gzip"}}}},
	}
	return cfg
}

func closeDelimited(n int) []string {
	var out []string
	for range n {
		out = append(out, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"+string(zhtml)+"<close>")
	}
	return out
}

// TestCompression is the core's rules applied by the engine, over HTTP/1.1 and h2c:
// compressed for clients that accept it (q-values, "*", the route's order on a tie) with
// Vary and a weak ETag; bodies with a length, chunked and delimited by the backend's close;
// left as they are when small, of another type, no-transform, already encoded, a range, a
// HEAD, refused by q=0, or on a route without compress; a 304 gets Vary and the ETag the
// client holds. The engine counts what it compressed; the encoders are back after.
func TestCompression(t *testing.T) {
	sb := newScriptBackend(t, closeDelimited(8)...)
	te, _ := h2cEngine(t, compressConfig(compressBackend(t), sb.addr()), nil)
	tests := []struct {
		method, path, accept string
		status               int
		wantEnc              string
		want                 []byte
		vary                 bool
		etag                 string
	}{
		{"GET", "/html", "gzip, deflate, br", 200, "br", zhtml, true, `W/"v1"`},
		{"GET", "/html", "gzip", 200, "gzip", zhtml, true, `W/"v1"`},
		{"GET", "/html", "br;q=0.1, gzip;q=1", 200, "gzip", zhtml, true, `W/"v1"`},
		{"GET", "/html", "br;q=0, gzip;q=0.5", 200, "gzip", zhtml, true, `W/"v1"`},
		{"GET", "/html", "*", 200, "br", zhtml, true, `W/"v1"`},
		{"GET", "/html", "gzip;q=0, br;q=0.000", 200, "", zhtml, true, `"v1"`},
		{"GET", "/html", "", 200, "", zhtml, true, `"v1"`},
		{"GET", "/chunked", "br", 200, "br", zbig, true, ""},
		{"GET", "/chunked", "gzip", 200, "gzip", zbig, true, ""},
		{"GET", "/close/", "gzip", 200, "gzip", zhtml, true, ""},
		{"GET", "/close/", "br", 200, "br", zhtml, true, ""},
		{"GET", "/tiny", "gzip", 200, "", zhtml[:100], false, ""},
		{"GET", "/png", "gzip", 200, "", zhtml, false, ""},
		{"GET", "/notransform", "gzip", 200, "", zhtml, false, ""},
		{"GET", "/range", "gzip", 206, "", zhtml[:2000], false, ""},
		{"GET", "/plain/html", "gzip", 200, "", zhtml, false, `"v1"`},
		{"HEAD", "/html", "gzip", 200, "", nil, false, `"v1"`},
		{"GET", "/304", "gzip", 304, "", nil, true, `W/"v1"`},
		{"GET", "/304", "identity", 304, "", nil, true, `"v1"`},
	}
	for _, pl := range zplanes() {
		t.Run(pl.name, func(t *testing.T) {
			before := te.Stats().Compressed
			compressed := 0
			for _, tc := range tests {
				if tc.path == "/close/" && pl.name == "h2c" {
					continue // one script backend: its answers are the HTTP/1.1 plane's
				}
				h := map[string]string{}
				if tc.accept != "" {
					h["Accept-Encoding"] = tc.accept
				}
				resp, body := get(t, pl.client, tc.method, te.url(tc.path), nil, h)
				where := fmt.Sprintf("%s %s (Accept-Encoding %q)", tc.method, tc.path, tc.accept)
				enc := resp.Header.Get("Content-Encoding")
				if resp.StatusCode != tc.status || enc != tc.wantEnc {
					t.Errorf("%s: %d, Content-Encoding %q; want %d, %q", where, resp.StatusCode, enc, tc.status, tc.wantEnc)
					continue
				}
				if got := decodeBody(t, enc, body); !bytes.Equal(got, tc.want) {
					t.Errorf("%s: %d bytes after decoding, want %d", where, len(got), len(tc.want))
				}
				if got := strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Accept-Encoding"); got != tc.vary {
					t.Errorf("%s: Vary %q, want Accept-Encoding: %v", where, resp.Header.Values("Vary"), tc.vary)
				}
				if tc.etag != "" && resp.Header.Get("Etag") != tc.etag {
					t.Errorf("%s: ETag %q, want %q", where, resp.Header.Get("Etag"), tc.etag)
				}
				if enc != "" {
					compressed++
					if len(body) >= len(tc.want) {
						t.Errorf("%s: %d coded bytes for %d", where, len(body), len(tc.want))
					}
					if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
						t.Errorf("%s: Content-Length %q on a coded body", where, resp.Header.Get("Content-Length"))
					}
					if pl.name == "http1" && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") {
						t.Errorf("%s: Transfer-Encoding %q, want chunked", where, resp.TransferEncoding)
					}
				}
			}
			if got := te.Stats().Compressed - before; got != int64(compressed) {
				t.Errorf("Stats.Compressed moved by %d, want %d", got, compressed)
			}
			if st := te.Stats(); st.Encoders != 0 || st.CompressDeclined != 0 {
				t.Errorf("after the requests: %d encoders in use, %d declined; want 0, 0", st.Encoders, st.CompressDeclined)
			}
		})
	}
	// Never compress twice: the backend's gzip body passes byte for byte.
	resp, body := get(t, testClient(), "GET", te.url("/pre"), nil, map[string]string{"Accept-Encoding": "br, gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(decodeBody(t, "gzip", body), zhtml) {
		t.Errorf("pre-compressed: Content-Encoding %q, %d bytes", resp.Header.Get("Content-Encoding"), len(body))
	}
}

// TestCompressionRawHTTP1 reads the engine's bytes as they are: an HTTP/1.1 client gets a
// coded body chunked (no Content-Length) and its connection kept, a chunked backend's
// trailers after the last chunk; an HTTP/1.0 client gets it delimited by the close.
func TestCompressionRawHTTP1(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/trailer" {
			w.Header().Set("Trailer", "X-Sum")
			_, _ = w.Write(zhtml)
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", "42")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(zhtml)))
		_, _ = w.Write(zhtml)
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/html"}, MinSize: 10, Algorithms: []string{"gzip"}}
	te := startEngine(t, cfg)
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, path := range []string{"/", "/trailer", "/"} { // one connection: kept after each
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: body: %v", path, err)
		}
		if resp.Header.Get("Content-Encoding") != "gzip" || resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 || resp.Close {
			t.Fatalf("%s: Content-Encoding %q, length %d, Transfer-Encoding %q, close %v", path, resp.Header.Get("Content-Encoding"), resp.ContentLength, resp.TransferEncoding, resp.Close)
		}
		if !bytes.Equal(decodeBody(t, "gzip", body), zhtml) {
			t.Fatalf("%s: the body does not decode to the page", path)
		}
		if path == "/trailer" && resp.Trailer.Get("X-Sum") != "42" {
			t.Fatalf("trailer X-Sum %q, want 42", resp.Trailer.Get("X-Sum"))
		}
	}
	raw := te.exchangeRaw(t, []byte("GET / HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"))
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok || !bytes.Contains(head, []byte("Content-Encoding: gzip")) || bytes.Contains(bytes.ToLower(head), []byte("content-length")) ||
		bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding")) || !bytes.Contains(head, []byte("Connection: close")) {
		t.Fatalf("HTTP/1.0 head:\n%s", head)
	}
	if !bytes.Equal(decodeBody(t, "gzip", body), zhtml) {
		t.Fatal("HTTP/1.0: the body delimited by the close does not decode to the page")
	}
}

// ztext is 1 MiB of text that compresses about 2:1 (hex digits of a pseudo-random
// sequence), longer than either coding's window: served round and round, coded, it still
// fills sockets, unlike a repeated page.
var ztext = func() []byte {
	b := make([]byte, 1<<20)
	const hex = "0123456789abcdef"
	x := uint64(1)
	for i := range b {
		if i%16 == 0 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		b[i] = hex[(x>>((i%16)*4))&15]
	}
	return b
}()

// zpattern is n bytes of ztext, round and round.
type zpattern struct{ n, off int64 }

func (p *zpattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(b)), p.n-p.off))
	at := int(p.off % int64(len(ztext)))
	k = copy(b[:k], ztext[at:])
	p.off += int64(k)
	return k, nil
}

var zsums sync.Map // n → [32]byte

func zpatternSum(n int64) [32]byte {
	if s, ok := zsums.Load(n); ok {
		return s.([32]byte)
	}
	h := sha256.New()
	_, _ = io.Copy(h, &zpattern{n: n})
	var s [32]byte
	copy(s[:], h.Sum(nil))
	zsums.Store(n, s)
	return s
}

// zbigBackend serves size bytes of zpattern as text/plain, with a length or (?chunked)
// without, counting what it wrote.
func zbigBackend(t testing.TB, size int64, written *atomic.Int64) string {
	return httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		buf := make([]byte, 64<<10)
		p := &zpattern{n: size}
		for {
			n, _ := p.Read(buf)
			if n == 0 {
				return
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			if written != nil {
				written.Add(int64(n))
			}
		}
	})
}

// Test64MiBCompressed streams 64 MiB compressed, with a length and chunked, brotli and gzip,
// over HTTP/1.1 and h2c, and checks every byte after decoding.
func Test64MiBCompressed(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", zbigBackend(t, big, nil)))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/plain"}, Algorithms: []string{"br", "gzip"}}
	te, _ := h2cEngine(t, cfg, nil)
	want := zpatternSum(big)
	for _, pl := range zplanes() {
		for _, enc := range []string{"br", "gzip"} {
			for _, q := range []string{"", "?chunked=1"} {
				name := pl.name + "/" + enc + q
				if raceEnabled && name != "http1/br" {
					continue // the race detector's coders are slow: one of the eight cases
				}
				t.Run(name, func(t *testing.T) {
					req, _ := http.NewRequest("GET", te.url("/"+q), nil)
					req.Header.Set("Accept-Encoding", enc)
					pl.client.Timeout = 3 * time.Minute
					resp, err := pl.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if got := resp.Header.Get("Content-Encoding"); got != enc {
						t.Fatalf("Content-Encoding %q, want %q", got, enc)
					}
					coded := &countReader{r: resp.Body}
					h := sha256.New()
					n, err := io.Copy(h, decoder(t, enc, coded))
					if err != nil || n != big {
						t.Fatalf("decoded %d bytes: %v", n, err)
					}
					if [32]byte(h.Sum(nil)) != want {
						t.Fatal("the decoded body differs from what the backend sent")
					}
					if coded.n >= big*3/4 {
						t.Errorf("%d coded bytes for %d", coded.n, big)
					}
					t.Logf("%d bytes coded to %d (%.2f)", big, coded.n, float64(coded.n)/big)
				})
			}
		}
	}
	waitFor(t, "the encoders back after the transfers", func() bool { return te.Stats().Encoders == 0 })
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestCompressedStreamFlushes: a compressed body the backend sends in parts reaches the
// client part by part: the client decodes the first part while the backend holds the
// second (which it sends only once the client has the first), over HTTP/1.1 and h2c, brotli
// and gzip, with a length and chunked.
func TestCompressedStreamFlushes(t *testing.T) {
	first := strings.Repeat("<p>first part</p>", 2000)
	last := "<p>the end</p>"
	release := make(chan struct{}, 1)
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(first)+len(last)))
		}
		_, _ = io.WriteString(w, first)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, last)
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/*"}, Algorithms: []string{"br", "gzip"}}
	te, _ := h2cEngine(t, cfg, nil)
	for _, pl := range zplanes() {
		for _, enc := range []string{"br", "gzip"} {
			for _, q := range []string{"", "?chunked=1"} {
				t.Run(pl.name+"/"+enc+q, func(t *testing.T) {
					req, _ := http.NewRequest("GET", te.url("/"+q), nil)
					req.Header.Set("Accept-Encoding", enc)
					resp, err := pl.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					zr := decoder(t, enc, resp.Body)
					got := make([]byte, len(first))
					done := make(chan error, 1)
					go func() { _, err := io.ReadFull(zr, got); done <- err }()
					select {
					case err := <-done:
						if err != nil || string(got) != first {
							t.Fatalf("first part: %v", err)
						}
					case <-time.After(5 * time.Second):
						t.Fatal("the first part did not reach the client while the backend held the rest")
					}
					release <- struct{}{}
					rest, err := io.ReadAll(zr)
					if err != nil || string(rest) != last {
						t.Fatalf("rest %q, %v", rest, err)
					}
				})
			}
		}
	}
}

// TestCompressedSlowReader: a client that reads nothing of a large compressed response stops
// the backend's reads (the backend blocks in its writes well before the end), the engine's
// heap grows by less than 6 MB (a gzip encoder is about 1 MB, the coded body 8 MB), and the
// transfer completes, every byte, once the client reads; over HTTP/1.1 and h2c.
func TestCompressedSlowReader(t *testing.T) {
	for _, plane := range []string{"http1", "h2c"} {
		t.Run(plane, func(t *testing.T) {
			var written atomic.Int64
			cfg := testConfig(testPool("p", "roundrobin", zbigBackend(t, slowSize, &written)))
			cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/plain"}, Algorithms: []string{"gzip"}}
			te, _ := h2cEngine(t, cfg, nil)
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			raw, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			_ = raw.(*net.TCPConn).SetReadBuffer(64 << 10)
			var body io.Reader
			if plane == "http1" {
				fmt.Fprintf(raw, "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
			}
			var h *rawH2
			if plane == "h2c" {
				h = dialH2Conn(t, raw)
				h.getWith(t, 1, "/", [2]string{"accept-encoding", "gzip"})
			}
			stalled := waitStall(t, &written)
			if stalled >= slowSize/2 {
				t.Fatalf("the backend wrote %d of %d bytes to a client that read nothing", stalled, slowSize)
			}
			var during runtime.MemStats
			runtime.ReadMemStats(&during)
			if grown := int64(during.HeapInuse) - int64(before.HeapInuse); grown > 6<<20 {
				t.Fatalf("heap grew by %d bytes while the client was not reading", grown)
			}
			if st := te.Stats(); st.Encoders != 1 {
				t.Fatalf("%d encoders in use during the stall, want 1", st.Encoders)
			}
			if plane == "http1" {
				resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Header.Get("Content-Encoding") != "gzip" {
					t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
				}
				body = resp.Body
			} else {
				body = h.bodyReader(t, 1)
			}
			hs := sha256.New()
			n, err := io.Copy(hs, decoder(t, "gzip", body))
			if err != nil || n != slowSize || [32]byte(hs.Sum(nil)) != zpatternSum(slowSize) {
				t.Fatalf("decoded %d bytes after resuming (%v), or they differ", n, err)
			}
			waitFor(t, "the encoder back", func() bool { return te.Stats().Encoders == 0 })
			t.Logf("the backend stalled after %d bytes; heap grew %d bytes", stalled, int64(during.HeapInuse)-int64(before.HeapInuse))
		})
	}
}

// slowSize is the body of the slow-reader and bound tests: large enough to fill the
// sockets' buffers many times over once coded.
const slowSize = 16 << 20

// waitStall waits for written to stop moving and returns where it stopped.
func waitStall(t *testing.T, written *atomic.Int64) int64 {
	t.Helper()
	var stalled int64
	for range 200 {
		time.Sleep(30 * time.Millisecond)
		w := written.Load()
		if w == stalled && w > 0 {
			return w
		}
		stalled = w
	}
	return stalled
}

// boundSize is the body of TestEncoderBound: coded, more than the sockets between a client
// that reads nothing and the engine hold, so that every response stays in flight.
const boundSize = 8 << 20

// TestEncoderBound: a shard has at most maxEncoders in use; a response that would be
// compressed beyond them goes as it is (Vary kept, counted in CompressDeclined), and every
// body, coded or not, arrives whole; the encoders go back when the responses end.
func TestEncoderBound(t *testing.T) {
	t.Setenv("BALLAST_H1_SHARDS", "1")
	cfg := testConfig(testPool("p", "roundrobin", zbigBackend(t, boundSize, nil)))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/plain"}, Algorithms: []string{"gzip"}}
	const limit, clients = 3, 8
	te := startEngineWith(t, cfg, func(e *Engine) { e.maxEncoders.Store(limit) })
	type held struct {
		c    net.Conn
		resp *http.Response
	}
	var conns []held
	coded := 0
	for range clients {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil) // the head; the body is left in the socket
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%d, Vary %q, want 200 and Vary: Accept-Encoding", resp.StatusCode, resp.Header.Get("Vary"))
		}
		if resp.Header.Get("Content-Encoding") == "gzip" {
			coded++
		}
		conns = append(conns, held{c, resp})
	}
	st := te.Stats()
	if coded != limit || st.Encoders != limit || st.CompressDeclined != clients-limit {
		t.Fatalf("%d of %d responses coded, %d encoders in use, %d declined; want %d, %d, %d", coded, clients, st.Encoders, st.CompressDeclined, limit, limit, clients-limit)
	}
	want := zpatternSum(boundSize)
	errs := make(chan error, len(conns))
	for i, h := range conns { // all at once: a client that takes nothing for idle_timeout is dropped
		go func() {
			hs := sha256.New()
			n, err := io.Copy(hs, decoder(t, h.resp.Header.Get("Content-Encoding"), h.resp.Body))
			if err == nil && (n != boundSize || [32]byte(hs.Sum(nil)) != want) {
				err = fmt.Errorf("%d bytes, or they differ", n)
			}
			if err != nil {
				err = fmt.Errorf("response %d: %w", i, err)
			}
			errs <- err
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	waitFor(t, "the encoders back", func() bool { return te.Stats().Encoders == 0 })
}

// wordsPage is about 6.4 KB of HTML paragraphs of pseudo-random words from a vocabulary of
// 300 (it codes to about 40 %, as scripts/h1zip.sh's page does): a page that costs a coder
// what real text does, unlike a repeated line.
func wordsPage() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 300)
	for i := range words {
		w := make([]byte, 2+r.IntN(8))
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		words[i] = string(w)
	}
	var b []byte
	for len(b) < 6300 {
		b = append(b, "<p>"...)
		for i := range 12 {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, words[r.IntN(len(words))]...)
		}
		b = append(b, "</p>\n"...)
	}
	return b
}

// BenchmarkForwardCompressed is the keep-alive forward step of a 6.4 KB page (wordsPage)
// compressed with gzip and with brotli, in-process (client, engine, backend over loopback),
// with the allocations of the whole process per request; /identity is the same page not
// compressed, for the ratio.
func BenchmarkForwardCompressed(b *testing.B) {
	body := wordsPage()
	page := "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
	for _, enc := range []string{"gzip", "br", "identity"} {
		b.Run(enc, func(b *testing.B) {
			addr := fixedBackendWith(b, page)
			cfg := testConfig(testPool("p", "roundrobin", addr))
			cfg.Listeners[0].ExposeBackend = false
			cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/html"}, Algorithms: []string{"br", "gzip"}}
			te := startEngine(b, cfg)
			k := newKeepAliveClient(b, te.addr)
			k.req = []byte("GET / HTTP/1.1\r\nHost: bench.example\r\nAccept-Encoding: " + enc + "\r\n\r\n")
			k.buf = make([]byte, 16<<10)
			end := []byte("</p>\n")
			if enc != "identity" {
				end = []byte("\r\n0\r\n\r\n")
			}
			for range 100 {
				k.doUntil(b, end)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				k.doUntil(b, end)
			}
		})
	}
}

// doUntil sends the request and reads until the response ends with end.
func (k *keepAliveClient) doUntil(tb testing.TB, end []byte) {
	if _, err := k.c.Write(k.req); err != nil {
		tb.Fatal(err)
	}
	got := 0
	for {
		n, err := k.c.Read(k.buf[got:])
		if err != nil {
			tb.Fatal(err)
		}
		got += n
		if bytes.HasSuffix(k.buf[:got], end) {
			return
		}
	}
}

// dialH2Conn starts HTTP/2 with prior knowledge on c (no SETTINGS of ours: the windows are
// 64 KiB until the reader grants more).
func dialH2Conn(t *testing.T, c net.Conn) *rawH2 {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{c: c, fr: http2.NewFramer(c, c)}
	r.enc = hpack.NewEncoder(&r.buf)
	r.dec = hpack.NewDecoder(4096, nil)
	r.fr.MaxHeaderListSize = 1 << 20
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return r
}

// getWith sends a GET with extra fields.
func (r *rawH2) getWith(t *testing.T, id uint32, path string, fields ...[2]string) {
	t.Helper()
	r.buf.Reset()
	all := append([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}}, fields...)
	for _, f := range all {
		_ = r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// bodyReader checks stream id's response head (200, content-encoding gzip) and returns a
// reader of its DATA, granting window as it reads.
func (r *rawH2) bodyReader(t *testing.T, id uint32) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	headers := make(chan string, 1)
	go func() {
		err := r.readUntil(func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.HeadersFrame:
				if f.StreamID == id {
					fields, _ := r.dec.DecodeFull(f.HeaderBlockFragment())
					var s []string
					for _, hf := range fields {
						s = append(s, hf.Name+"="+hf.Value)
					}
					headers <- strings.Join(s, " ")
					return f.StreamEnded()
				}
			case *http2.DataFrame:
				if f.StreamID == id {
					if _, err := pw.Write(f.Data()); err != nil {
						return true
					}
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
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	select {
	case h := <-headers:
		if !strings.Contains(h, ":status=200") || !strings.Contains(h, "content-encoding=gzip") || strings.Contains(h, "content-length") {
			t.Fatalf("stream %d head: %s", id, h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no response head")
	}
	return pr
}

// fixedBackendWith is fixedBackend answering resp.
func fixedBackendWith(tb testing.TB, resp string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				var pending []byte
				rb := []byte(resp)
				for {
					n, err := c.Read(buf[len(pending):])
					if err != nil {
						return
					}
					data := buf[:len(pending)+n]
					for {
						i := bytes.Index(data, []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						data = data[i+4:]
						if _, err := c.Write(rb); err != nil {
							return
						}
					}
					pending = buf[:copy(buf, data)]
				}
			}()
		}
	}()
	tb.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// TestEncoderReleasedWhenClientLeaves: a client that leaves in the middle of a compressed
// response (its connection closed over HTTP/1.1, its stream reset over h2c) gives the
// encoder back to the shard.
func TestEncoderReleasedWhenClientLeaves(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", zbigBackend(t, boundSize, nil)))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/plain"}, Algorithms: []string{"br"}}
	te, _ := h2cEngine(t, cfg, nil)
	for _, plane := range []string{"http1", "h2c"} {
		t.Run(plane, func(t *testing.T) {
			raw, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			_ = raw.(*net.TCPConn).SetReadBuffer(64 << 10)
			if plane == "http1" {
				fmt.Fprintf(raw, "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br\r\n\r\n")
				waitFor(t, "the response under way", func() bool { return te.Stats().Encoders == 1 })
				_ = raw.Close()
			} else {
				h := dialH2Conn(t, raw)
				h.getWith(t, 1, "/", [2]string{"accept-encoding", "br"})
				waitFor(t, "the response under way", func() bool { return te.Stats().Encoders == 1 })
				if err := h.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the encoder back", func() bool { return te.Stats().Encoders == 0 })
		})
	}
}

// TestCompressedTrailers: a chunked backend's trailers follow a compressed body: after the
// last chunk over HTTP/1.1, as the stream's last HEADERS over h2c.
func TestCompressedTrailers(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Trailer", "X-Sum")
		_, _ = w.Write(zhtml)
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sum", "42")
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/html"}, Algorithms: []string{"br"}}
	te, _ := h2cEngine(t, cfg, nil)
	for _, pl := range zplanes() {
		req, _ := http.NewRequest("GET", te.url("/"), nil)
		req.Header.Set("Accept-Encoding", "br")
		resp, body := doReq(t, pl.client, req)
		if resp.Header.Get("Content-Encoding") != "br" || !bytes.Equal(decodeBody(t, "br", body), zhtml) {
			t.Errorf("%s: Content-Encoding %q, the body does not decode to the page", pl.name, resp.Header.Get("Content-Encoding"))
		}
		if resp.Trailer.Get("X-Sum") != "42" {
			t.Errorf("%s: trailer X-Sum %q, want 42", pl.name, resp.Trailer.Get("X-Sum"))
		}
	}
}
