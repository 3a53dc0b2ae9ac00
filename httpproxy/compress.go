package httpproxy

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	brotli "github.com/molecule-man/go-brrr"
	"github.com/valyala/fasthttp"

	"ballast/config"
)

// Compression levels: brotli 4 and gzip 5 cost about the same CPU and suit on-the-fly
// compression (fasthttp and nginx choose similar ones).
const (
	brotliLevel = 4
	gzipLevel   = 5
)

// Encodings, in the order a route lists them.
const (
	encNone uint8 = iota
	encBrotli
	encGzip
)

// compression is a route's compiled compress section.
type compression struct {
	types    []string // lower case; "text/*" matches the whole type
	minSize  int
	prefs    []uint8 // encodings in order of preference
	prefName []string
}

func compileCompress(c *config.Compress) *compression {
	if c == nil {
		return nil
	}
	cp := &compression{minSize: c.MinSize}
	for _, t := range c.Types {
		cp.types = append(cp.types, strings.ToLower(t))
	}
	for _, a := range c.Algorithms {
		switch a {
		case "br":
			cp.prefs, cp.prefName = append(cp.prefs, encBrotli), append(cp.prefName, "br")
		case "gzip":
			cp.prefs, cp.prefName = append(cp.prefs, encGzip), append(cp.prefName, "gzip")
		}
	}
	return cp
}

// choose returns the encoding to apply to the response in ctx, encNone when it should go
// as it is: the client must accept one of the route's encodings, the response must be a
// successful one with a body of a listed type, at least min_size when its length is known,
// not already encoded (never compress twice) and not marked no-transform.
func (cp *compression) choose(ctx *fasthttp.RequestCtx) uint8 {
	req, resp := &ctx.Request.Header, &ctx.Response.Header
	if req.IsHead() {
		return encNone
	}
	if s := resp.StatusCode(); s < 200 || s >= 300 || s == 204 || s == 206 {
		return encNone
	}
	if len(resp.ContentEncoding()) > 0 || hasToken(resp.Peek("Cache-Control"), "no-transform") {
		return encNone
	}
	if cl := resp.ContentLength(); cl >= 0 && cl < cp.minSize || cl == 0 {
		return encNone
	}
	if !cp.compressible(resp.ContentType()) {
		return encNone
	}
	ae := req.Peek("Accept-Encoding")
	for i, e := range cp.prefs {
		if acceptsEncoding(ae, cp.prefName[i]) {
			return e
		}
	}
	return encNone
}

// compressible reports whether the media type of ct is one of the route's types.
func (cp *compression) compressible(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = trimSpace(ct)
	for _, t := range cp.types {
		if strings.HasSuffix(t, "/*") {
			if len(ct) > len(t)-1 && asciiEqualFold(ct[:len(t)-1], t[:len(t)-1]) {
				return true
			}
		} else if asciiEqualFold(ct, t) {
			return true
		}
	}
	return false
}

// acceptsEncoding reports whether an Accept-Encoding value accepts name (lower case) with a
// non-zero quality, by name or through "*" (RFC 9110 §12.5.3).
func acceptsEncoding(ae []byte, name string) bool {
	named, star := 0, 0 // 0 unseen, 1 accepted, -1 refused (q=0)
	forEachToken(ae, func(tok []byte) {
		coding, params, _ := bytes.Cut(tok, []byte{';'})
		coding = trimSpace(coding)
		v := 1
		if zeroQuality(params) {
			v = -1
		}
		switch {
		case asciiEqualFold(coding, name):
			named = v
		case len(coding) == 1 && coding[0] == '*':
			star = v
		}
	})
	if named != 0 {
		return named > 0
	}
	return star > 0
}

// zeroQuality reports whether the parameters of a coding say q=0 (0, 0.0, 0.00, 0.000).
func zeroQuality(params []byte) bool {
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, []byte{';'})
		p = trimSpace(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		q := p[2:]
		if len(q) == 0 || q[0] != '0' {
			return false
		}
		for _, c := range q[1:] {
			if c != '.' && c != '0' {
				return false
			}
		}
		return true
	}
	return false
}

// startCompression marks the response as encoded with enc: Content-Encoding, Vary, a weak
// ETag (the bytes differ from the identity representation), and a buffered body compressed
// now. A streamed body is wrapped by responseStream.
func (st *reqState) startCompression(ctx *fasthttp.RequestCtx, enc uint8, streamed bool) {
	resp := &ctx.Response
	h := &resp.Header
	if enc == encBrotli {
		h.SetContentEncoding("br")
	} else {
		h.SetContentEncoding("gzip")
	}
	if v := h.Peek("Vary"); !hasToken(v, "accept-encoding") {
		h.Add("Vary", "Accept-Encoding")
	}
	if et := h.Peek("Etag"); len(et) > 0 && et[0] == '"' {
		st.tmp = append(append(st.tmp[:0], "W/"...), et...)
		h.SetBytesV("Etag", st.tmp)
	}
	if streamed {
		st.zenc = enc
		return
	}
	body := resp.Body()
	if enc == encBrotli {
		st.ztmp = fasthttp.AppendBrotliBytesLevel(st.ztmp[:0], body, brotliLevel)
	} else {
		st.ztmp = fasthttp.AppendGzipBytesLevel(st.ztmp[:0], body, gzipLevel)
	}
	resp.SetBody(st.ztmp)
}

// responseStream is the body stream deliver hands the server: the relay itself, or the relay
// through a compressor when the policy chose to compress.
func (ls *listenerState) responseStream(t *table, x *exchange, cl int) (io.Reader, int) {
	if t.pol == nil || x.pol.zenc == encNone {
		return &x.relay, cl
	}
	x.pol.zr.init(&x.relay, x.pol.zenc)
	return &x.pol.zr, -1
}

// compressReader compresses a body stream as the server reads it, without a goroutine:
// each Read pulls from the source until the encoder has produced something. When the source
// delivers less than a full buffer (a slow or chunky backend), the encoder is flushed so the
// client is not kept waiting for data the backend already sent. Close closes the source.
type compressReader struct {
	src  io.ReadCloser
	enc  uint8
	gz   *gzip.Writer
	br   *brotli.Writer
	out  outBuf
	in   []byte
	off  int
	done bool
}

// outBuf collects what the encoder writes.
type outBuf struct{ b []byte }

func (o *outBuf) Write(p []byte) (int, error) { o.b = append(o.b, p...); return len(p), nil }

var (
	gzipWriters   sync.Pool
	brotliWriters sync.Pool
	zbufs         = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
)

func (r *compressReader) init(src io.ReadCloser, enc uint8) {
	*r = compressReader{src: src, enc: enc, out: outBuf{b: r.out.b[:0]}}
	r.in = *(zbufs.Get().(*[]byte))
	if enc == encBrotli {
		if w, ok := brotliWriters.Get().(*brotli.Writer); ok {
			w.Reset(&r.out)
			r.br = w
		} else {
			r.br, _ = brotli.NewWriter(&r.out, brotliLevel) // the level is valid: no error
		}
		return
	}
	if w, ok := gzipWriters.Get().(*gzip.Writer); ok {
		w.Reset(&r.out)
		r.gz = w
	} else {
		r.gz, _ = gzip.NewWriterLevel(&r.out, gzipLevel) // the level is valid: no error
	}
}

func (r *compressReader) Read(p []byte) (int, error) {
	for r.off >= len(r.out.b) {
		if r.done {
			return 0, io.EOF
		}
		r.out.b, r.off = r.out.b[:0], 0
		n, err := r.src.Read(r.in)
		if n > 0 {
			if _, werr := r.write(r.in[:n]); werr != nil {
				return 0, werr
			}
		}
		switch {
		case err == io.EOF:
			r.done = true
			if cerr := r.closeEncoder(); cerr != nil {
				return 0, cerr
			}
		case err != nil:
			return 0, err
		case n < len(r.in) && len(r.out.b) == 0:
			if ferr := r.flush(); ferr != nil {
				return 0, ferr
			}
		}
	}
	n := copy(p, r.out.b[r.off:])
	r.off += n
	return n, nil
}

func (r *compressReader) write(p []byte) (int, error) {
	if r.br != nil {
		return r.br.Write(p)
	}
	return r.gz.Write(p)
}

func (r *compressReader) flush() error {
	if r.br != nil {
		return r.br.Flush()
	}
	return r.gz.Flush()
}

func (r *compressReader) closeEncoder() error {
	if r.br != nil {
		return r.br.Close()
	}
	return r.gz.Close()
}

// Close recycles the encoder, then ends the source (the relay, which releases the backend
// and hands the exchange holding r back to its pool: r is not touched after that).
func (r *compressReader) Close() error {
	src := r.src
	if src == nil {
		return nil
	}
	r.src = nil
	if r.br != nil {
		brotliWriters.Put(r.br)
		r.br = nil
	}
	if r.gz != nil {
		gzipWriters.Put(r.gz)
		r.gz = nil
	}
	if r.in != nil {
		in := r.in
		zbufs.Put(&in)
		r.in = nil
	}
	if cap(r.out.b) > 64<<10 {
		r.out.b = nil
	}
	return src.Close()
}
