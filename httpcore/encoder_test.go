package httpcore

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"sync"
	"testing"

	brotli "github.com/molecule-man/go-brrr"

	"ballast/config"
)

// decodeAll decodes a whole body coded with enc.
func decodeAll(t *testing.T, enc Encoding, b []byte) []byte {
	t.Helper()
	var r io.Reader
	if enc == EncBrotli {
		r = brotli.NewReader(bytes.NewReader(b))
	} else {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", enc.Name(), err)
	}
	return out
}

// TestEncoderFlushPoints: what an Encoder produced up to each Flush decodes to everything
// written up to it (a streamed body reaches its client as it goes); Close ends a stream that
// decodes whole; a reused Encoder starts afresh; a Flush with nothing new adds nothing.
func TestEncoderFlushPoints(t *testing.T) {
	parts := []string{strings.Repeat("<p>first part</p>", 300), "<p>second</p>", strings.Repeat("x", 70000), "end"}
	for _, enc := range []Encoding{EncBrotli, EncGzip} {
		t.Run(enc.Name(), func(t *testing.T) {
			z := NewEncoder(enc)
			for round := range 2 {
				z.Reset(0)
				var out []byte
				written := ""
				for _, p := range parts {
					out = z.Write(out, []byte(p))
					written += p
					if !z.Pending() {
						t.Fatal("Pending after a Write: false")
					}
					out = z.Flush(out)
					if z.Pending() {
						t.Fatal("Pending after a Flush: true")
					}
					if n := len(out); len(z.Flush(out)) != n {
						t.Fatal("a Flush with nothing new produced bytes")
					}
					// The prefix so far decodes to what was written (a reader stops at its end).
					got := prefixDecode(t, enc, out, len(written))
					if got != written {
						t.Fatalf("round %d: after %d bytes written the flushed prefix decodes to %d", round, len(written), len(got))
					}
				}
				out = z.Close(out)
				if got := decodeAll(t, enc, out); string(got) != written {
					t.Fatalf("round %d: whole stream decodes to %d bytes, want %d", round, len(got), len(written))
				}
			}
		})
	}
}

// prefixDecode reads n bytes from an unfinished coded stream.
func prefixDecode(t *testing.T, enc Encoding, b []byte, n int) string {
	t.Helper()
	var r io.Reader
	if enc == EncBrotli {
		r = brotli.NewReader(bytes.NewReader(b))
	} else {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("%s prefix: %v", enc.Name(), err)
	}
	return string(got)
}

// TestRespondWithoutEncoder: an engine out of encoders gets the identity answer for a
// response it would have compressed (Vary kept, no Content-Encoding, the ETag strong) and
// Declined says so; a response that would not have been compressed is not counted.
func TestRespondWithoutEncoder(t *testing.T) {
	c := coreFor(t, onePool(config.Route{Pool: "p", RoutePolicy: config.RoutePolicy{Compress: &config.Compress{
		Types: []string{"text/*"}, MinSize: 100, Algorithms: []string{"br", "gzip"}}}}))
	b := c.Table().Pool("p").Upstream.Backends()[0]
	for _, tc := range []struct {
		ae       string
		declined bool
	}{{"gzip", true}, {"gzip;q=0", false}} {
		r := newReq("GET", "/")
		r.Add(keyAcceptEnc, []byte(tc.ae))
		x := begin(t, c, r)
		x.WithoutEncoder()
		resp := &testResp{status: 200, cl: 1000}
		resp.Set(keyContentType, []byte("text/html"))
		resp.Set(keyETag, []byte(`"v1"`))
		enc := x.Respond(r, resp, b)
		if enc != EncNone || resp.get("Content-Encoding") != "" || resp.get("Vary") != "Accept-Encoding" || resp.get("Etag") != `"v1"` {
			t.Errorf("%q: encoding %v, Content-Encoding %q, Vary %q, ETag %q", tc.ae, enc, resp.get("Content-Encoding"), resp.get("Vary"), resp.get("Etag"))
		}
		if x.Declined() != tc.declined {
			t.Errorf("%q: Declined %v, want %v", tc.ae, x.Declined(), tc.declined)
		}
		x.Reset()
		if x.Declined() {
			t.Error("Declined survives Reset")
		}
	}
}

// fuzzEncoders reuses the encoders across FuzzEncoder's runs (reuse is what engines do, and
// a new one's megabytes of state would slow the fuzzer down to a few runs a second).
var fuzzEncoders [2]sync.Pool

// FuzzEncoder: whatever the body and wherever the engine flushes (ops: a byte per write,
// bit 0 of each asks for a Flush after it), the coded stream decodes to the body, and what
// was produced up to a Flush decodes to everything written before it.
func FuzzEncoder(f *testing.F) {
	f.Add([]byte("hello, hello, hello"), []byte{7, 3, 1, 200}, false)
	f.Add(bytes.Repeat([]byte("<p>x</p>"), 5000), []byte{255, 255, 0, 1}, true)
	f.Fuzz(func(t *testing.T, body, ops []byte, br bool) {
		enc := EncGzip
		if br {
			enc = EncBrotli
		}
		z, _ := fuzzEncoders[enc-1].Get().(*Encoder)
		if z == nil {
			z = NewEncoder(enc)
		}
		defer fuzzEncoders[enc-1].Put(z)
		z.Reset(int64(len(body)))
		var out []byte
		off := 0
		for _, op := range ops {
			if off >= len(body) {
				break
			}
			n := min(int(op)*37+1, len(body)-off)
			out = z.Write(out, body[off:off+n])
			off += n
			if op&1 == 1 {
				out = z.Flush(out)
				if got := prefixDecode(t, enc, out, off); got != string(body[:off]) {
					t.Fatalf("the prefix after %d bytes decodes wrong", off)
				}
			}
		}
		out = z.Write(out, body[off:])
		out = z.Close(out)
		if got := decodeAll(t, enc, out); !bytes.Equal(got, body) {
			t.Fatalf("decoded %d bytes, want %d", len(got), len(body))
		}
	})
}
