package httpproxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	brotli "github.com/molecule-man/go-brrr"

	"ballast/config"
)

func decode(t *testing.T, enc string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	default:
		return body
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", enc, err)
	}
	return out
}

// TestCompression: compressible responses are compressed for clients that accept it (br
// preferred, gzip otherwise), buffered and streamed; what is small, of another type, already
// encoded, a HEAD or refused by q=0 goes as it is; a route without compress never compresses.
func TestCompression(t *testing.T) {
	html := []byte(strings.Repeat("<p>hello compressible world</p>\n", 200))      // 6.4 KB, buffered
	big := []byte(strings.Repeat("<li>a much longer streamed page</li>\n", 8000)) // 296 KB, streamed
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/html", "/plain/html":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Etag", `"v1"`)
			_, _ = w.Write(html)
		case "/big":
			h.Set("Content-Type", "text/html")
			_, _ = w.Write(big)
		case "/tiny":
			h.Set("Content-Type", "text/html")
			_, _ = w.Write(html[:100])
		case "/png":
			h.Set("Content-Type", "image/png")
			_, _ = w.Write(html)
		case "/pre":
			h.Set("Content-Type", "text/html")
			h.Set("Content-Encoding", "gzip")
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(html)
			_ = zw.Close()
			_, _ = w.Write(b.Bytes())
		}
	})
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = []config.Route{
		{PathPrefix: "/plain/", Pool: "p"},
		{Pool: "p", RoutePolicy: config.RoutePolicy{Compress: &config.Compress{
			Types: config.DefaultCompressTypes, MinSize: 1024, Algorithms: []string{"br", "gzip"}}}},
	}
	tp := startProxy(t, cfg)
	c := testClient()
	tests := []struct {
		method, path, accept string
		wantEnc              string
		want                 []byte
	}{
		{"GET", "/html", "gzip, deflate, br", "br", html},
		{"GET", "/html", "gzip", "gzip", html},
		{"GET", "/html", "br;q=0, gzip;q=0.5", "gzip", html},
		{"GET", "/html", "*", "br", html},
		{"GET", "/html", "gzip;q=0, br;q=0.000", "", html},
		{"GET", "/html", "", "", html},
		{"GET", "/big", "br", "br", big},
		{"GET", "/big", "gzip", "gzip", big},
		{"GET", "/tiny", "gzip", "", html[:100]},
		{"GET", "/png", "gzip", "", html},
		{"GET", "/plain/html", "gzip", "", html},
		{"HEAD", "/html", "gzip", "", nil},
	}
	for _, tc := range tests {
		h := map[string]string{}
		if tc.accept != "" {
			h["Accept-Encoding"] = tc.accept
		}
		resp, body := get(t, c, tc.method, tp.url(tc.path), nil, h)
		enc := resp.Header.Get("Content-Encoding")
		if enc != tc.wantEnc {
			t.Errorf("%s %s (Accept-Encoding %q): Content-Encoding %q, want %q", tc.method, tc.path, tc.accept, enc, tc.wantEnc)
			continue
		}
		if got := decode(t, enc, body); !bytes.Equal(got, tc.want) {
			t.Errorf("%s %s (%q): %d bytes after decoding, want %d", tc.method, tc.path, tc.accept, len(got), len(tc.want))
		}
		if enc != "" {
			if len(body) >= len(tc.want) {
				t.Errorf("%s %s: %d compressed bytes for %d", tc.method, tc.path, len(body), len(tc.want))
			}
			if !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
				t.Errorf("%s: no Vary: Accept-Encoding", tc.path)
			}
			if tc.path == "/html" && resp.Header.Get("Etag") != `W/"v1"` {
				t.Errorf("ETag %q, want the weak W/\"v1\"", resp.Header.Get("Etag"))
			}
		}
	}
	// Never compress twice: the backend's gzip body passes byte for byte.
	resp, body := get(t, c, "GET", tp.url("/pre"), nil, map[string]string{"Accept-Encoding": "br, gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(decode(t, "gzip", body), html) {
		t.Errorf("pre-compressed: Content-Encoding %q, %d bytes", resp.Header.Get("Content-Encoding"), len(body))
	}
}

// TestCompressionStreamsAsItGoes: a compressed streamed body reaches the client as the
// backend sends it, not when the backend finishes.
func TestCompressionStreamsAsItGoes(t *testing.T) {
	first := strings.Repeat("<p>first part</p>", 2000) // over the buffered-body size: streamed
	release := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, first)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "<p>the end</p>")
	})
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes[0].Compress = &config.Compress{Types: []string{"text/*"}, MinSize: 0, Algorithms: []string{"gzip"}}
	tp := startProxy(t, cfg)
	req, _ := http.NewRequest("GET", tp.url("/"), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(first))
	if _, err := io.ReadFull(zr, got); err != nil || string(got) != first {
		t.Fatalf("first part: %v", err)
	}
	close(release)
	rest, err := io.ReadAll(zr)
	if err != nil || string(rest) != "<p>the end</p>" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}
