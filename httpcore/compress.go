package httpcore

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	brotli "github.com/molecule-man/go-brrr"

	"ballast/config"
)

// Compression levels: brotli 4 and gzip 5 cost about the same CPU and suit on-the-fly
// compression (fasthttp and nginx choose similar ones). brotliWindow is brotli's window,
// 256 KiB (lgwin 18; nginx's brotli module takes 512 KiB): at the library's default, 4 MiB,
// an encoder's state passes 9 MB once a body passes 256 KiB, at 18 it stays near 2 MB (a
// gzip encoder's is about 1 MB whatever the body).
const (
	brotliLevel  = 4
	brotliWindow = 18
	gzipLevel    = 5
)

// Encoding is a content coding the core may apply to a response body.
type Encoding uint8

// Encodings.
const (
	EncNone Encoding = iota
	EncBrotli
	EncGzip
)

// Name is the coding's name in Content-Encoding.
func (e Encoding) Name() string {
	switch e {
	case EncBrotli:
		return "br"
	case EncGzip:
		return "gzip"
	}
	return ""
}

// compression is a route's compiled compress section.
type compression struct {
	types []string   // lower case; "text/*" matches the whole type
	min   int        // min_size
	prefs []Encoding // in order of preference
}

func compileCompress(c *config.Compress) *compression {
	if c == nil {
		return nil
	}
	cp := &compression{min: c.MinSize}
	for _, t := range c.Types {
		cp.types = append(cp.types, strings.ToLower(t))
	}
	for _, a := range c.Algorithms {
		switch a {
		case "br":
			cp.prefs = append(cp.prefs, EncBrotli)
		case "gzip":
			cp.prefs = append(cp.prefs, EncGzip)
		}
	}
	return cp
}

// eligible reports whether the response could be compressed for some client: a successful
// response with a body of a listed type, at least min_size when its length is known, not
// already encoded (never compress twice) and not marked no-transform. Such a response varies
// with Accept-Encoding whether or not this client gets it compressed.
func (cp *compression) eligible(req Request, resp Response) bool {
	if string(req.Method()) == "HEAD" {
		return false
	}
	if s := resp.Status(); s < 200 || s >= 300 || s == 204 || s == 206 {
		return false
	}
	if len(resp.Peek(keyContentEnc)) > 0 || HasToken(resp.Peek(keyCacheControl), "no-transform") {
		return false
	}
	if cl := resp.ContentLength(); cl >= 0 && cl < int64(cp.min) || cl == 0 {
		return false
	}
	return cp.compressible(resp.Peek(keyContentType))
}

// compressible reports whether the media type of ct is one of the route's types.
func (cp *compression) compressible(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = trimSpace(ct)
	for _, t := range cp.types {
		if strings.HasSuffix(t, "/*") {
			if len(ct) > len(t)-1 && LowerEqualFold(ct[:len(t)-1], t[:len(t)-1]) {
				return true
			}
		} else if LowerEqualFold(ct, t) {
			return true
		}
	}
	return false
}

// choose returns the route's encoding the client prefers (RFC 9110 §12.5.3): the highest
// quality the Accept-Encoding value gives it, by name or through "*"; a tie goes to the
// route's order; EncNone when the client accepts none of them.
func (cp *compression) choose(ae []byte) Encoding {
	best, bestQ := EncNone, 0
	for _, e := range cp.prefs {
		if q := quality(ae, e.Name()); q > bestQ {
			best, bestQ = e, q
		}
	}
	return best
}

// quality is the quality (0 to 1000) an Accept-Encoding value gives coding name: its own
// entry's, else "*"'s, else 0.
func quality(ae []byte, name string) int {
	named, star := -1, -1
	for len(ae) > 0 {
		var tok []byte
		tok, ae = nextToken(ae)
		coding, params, _ := bytes.Cut(tok, []byte{';'})
		coding = trimSpace(coding)
		switch {
		case LowerEqualFold(coding, name):
			named = qvalue(params)
		case len(coding) == 1 && coding[0] == '*':
			star = qvalue(params)
		}
	}
	if named >= 0 {
		return named
	}
	return max(star, 0)
}

// qvalue reads the q parameter of a coding (RFC 9110 §12.4.2) in thousandths; 1000 when there
// is none, 0 when it cannot be read.
func qvalue(params []byte) int {
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, []byte{';'})
		p = trimSpace(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		q := p[2:]
		if len(q) == 0 || q[0] != '0' && q[0] != '1' {
			return 0
		}
		v := int(q[0]-'0') * 1000
		if len(q) > 1 {
			if q[1] != '.' {
				return 0
			}
			scale := 100
			for _, c := range q[2:] {
				// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
				if c < '0' || c > '9' || scale == 0 || v == 1000 && c != '0' {
					return 0
				}
				v += int(c-'0') * scale
				scale /= 10
			}
		}
		return v
	}
	return 1000
}

// weakenETag makes a strong ETag weak: the bytes of an encoded body differ from the identity
// representation's, and a 304 must name the validator the client holds.
func (x *Exchange) weakenETag(resp Response) {
	if et := resp.Peek(keyETag); len(et) > 0 && et[0] == '"' {
		x.tmp = append(append(x.tmp[:0], "W/"...), et...)
		resp.Set(keyETag, x.tmp)
	}
}

// addVary adds Accept-Encoding to Vary unless it is there.
func addVary(resp Response) {
	if v := resp.Peek(keyVary); !HasToken(v, "accept-encoding") && !HasToken(v, "*") {
		resp.Add(keyVary, keyAcceptEnc)
	}
}

var (
	gzipWriters   sync.Pool
	brotliWriters sync.Pool
	zbufs         = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
)

// outBuf collects what an encoder writes.
type outBuf struct{ b []byte }

func (o *outBuf) Write(p []byte) (int, error) { o.b = append(o.b, p...); return len(p), nil }

// AppendCompressed appends body encoded with enc to dst: for a body the engine holds whole.
func AppendCompressed(dst, body []byte, enc Encoding) []byte {
	out := outBuf{b: dst}
	if enc == EncBrotli {
		w := brotliWriter(&out)
		_, _ = w.Write(body)
		_ = w.Close()
		brotliWriters.Put(w)
		return out.b
	}
	w := gzipWriter(&out)
	_, _ = w.Write(body)
	_ = w.Close()
	gzipWriters.Put(w)
	return out.b
}

func brotliWriter(dst io.Writer) *brotli.Writer {
	if w, ok := brotliWriters.Get().(*brotli.Writer); ok {
		w.Reset(dst)
		return w
	}
	w, _ := brotli.NewWriterOptions(dst, brotliLevel, brotli.WriterOptions{LGWin: brotliWindow}) // valid: no error
	return w
}

func gzipWriter(dst io.Writer) *gzip.Writer {
	if w, ok := gzipWriters.Get().(*gzip.Writer); ok {
		w.Reset(dst)
		return w
	}
	w, _ := gzip.NewWriterLevel(dst, gzipLevel) // the level is valid: no error
	return w
}

// Compressor compresses a body stream as it is read, without a goroutine: each Read pulls
// from the source until the encoder has produced something. When the source delivers less
// than a full buffer (a slow or chunky backend), the encoder is flushed so the client is not
// kept waiting for data the backend already sent. Close recycles the encoder and closes the
// source. The zero Compressor is ready for Init; it can be kept in pooled per-request state.
type Compressor struct {
	src  io.ReadCloser
	gz   *gzip.Writer
	br   *brotli.Writer
	out  outBuf
	in   []byte
	off  int
	done bool
}

// Init starts compressing src with enc.
func (r *Compressor) Init(src io.ReadCloser, enc Encoding) {
	*r = Compressor{src: src, out: outBuf{b: r.out.b[:0]}}
	r.in = *(zbufs.Get().(*[]byte))
	if enc == EncBrotli {
		r.br = brotliWriter(&r.out)
		return
	}
	r.gz = gzipWriter(&r.out)
}

func (r *Compressor) Read(p []byte) (int, error) {
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

func (r *Compressor) write(p []byte) (int, error) {
	if r.br != nil {
		return r.br.Write(p)
	}
	return r.gz.Write(p)
}

func (r *Compressor) flush() error {
	if r.br != nil {
		return r.br.Flush()
	}
	return r.gz.Flush()
}

func (r *Compressor) closeEncoder() error {
	if r.br != nil {
		return r.br.Close()
	}
	return r.gz.Close()
}

// Close recycles the encoder, then closes the source (which may hand the state holding r back
// to its pool: r is not touched after that).
func (r *Compressor) Close() error {
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

// Encoder compresses a body pushed to it as it arrives, for an engine that is fed the
// backend's bytes on its own loop (no goroutine, no reader): Write, Flush and Close append
// the coded bytes they produce to the caller's buffer. Flush makes everything written so far
// decodable (a streamed body reaches its client as the backend sends it); Close ends the
// stream. An Encoder is reused: Reset starts the next body. Its state is what the encoding
// needs (brotliWindow): an engine bounds how many it holds. Writing to memory cannot fail, so
// nothing returns an error.
type Encoder struct {
	enc  Encoding
	gz   *gzip.Writer
	br   *brotli.Writer
	out  outBuf
	held bool // bytes written since the last Flush
}

// NewEncoder returns an encoder for enc (EncBrotli or EncGzip).
func NewEncoder(enc Encoding) *Encoder {
	z := &Encoder{enc: enc}
	if enc == EncBrotli {
		z.br = brotliWriter(&z.out)
		z.br.Reset(&z.out) // a Writer that was Reset keeps its state across Close
	} else {
		z.enc = EncGzip
		z.gz = gzipWriter(&z.out)
	}
	return z
}

// Encoding is the coding z produces.
func (z *Encoder) Encoding() Encoding { return z.enc }

// Reset starts a new body; size is its length when known (else 0), which lets brotli size
// its tables for a small body.
func (z *Encoder) Reset(size int64) {
	z.held = false
	if z.br != nil {
		z.br.ResetWithSizeHint(&z.out, uint(max(size, 0)))
		return
	}
	z.gz.Reset(&z.out)
}

// Write feeds p to the encoder and appends to dst what it produced (often nothing: the
// encoder holds bytes until its block fills, Flush or Close).
func (z *Encoder) Write(dst, p []byte) []byte {
	if len(p) == 0 {
		return dst
	}
	z.out.b = dst
	if z.br != nil {
		_, _ = z.br.Write(p)
	} else {
		_, _ = z.gz.Write(p)
	}
	z.held = true
	return z.take()
}

// Pending reports bytes written since the last Flush: Flush would produce something.
func (z *Encoder) Pending() bool { return z.held }

// Flush appends to dst the coding of everything written so far (nothing when nothing was
// written since the last Flush).
func (z *Encoder) Flush(dst []byte) []byte {
	if !z.held {
		return dst
	}
	z.out.b = dst
	if z.br != nil {
		_ = z.br.Flush()
	} else {
		_ = z.gz.Flush()
	}
	z.held = false
	return z.take()
}

// Close appends to dst the end of the stream.
func (z *Encoder) Close(dst []byte) []byte {
	z.out.b = dst
	if z.br != nil {
		_ = z.br.Close()
	} else {
		_ = z.gz.Close()
	}
	z.held = false
	return z.take()
}

func (z *Encoder) take() []byte {
	b := z.out.b
	z.out.b = nil
	return b
}
