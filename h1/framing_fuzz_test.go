//go:build linux

package h1

import (
	"bytes"
	"strconv"
	"testing"

	"ballast/internal/h1conformance"
)

// refChunked decodes a whole chunked body strictly (RFC 9112 §7.1), independently of
// chunkDecoder: the data, the trailer lines, where it ends, and whether it is valid.
func refChunked(b []byte) (data, trailer []byte, end int, ok bool) {
	p := 0
	line := func() ([]byte, bool) {
		i := bytes.Index(b[p:], []byte("\r\n"))
		if i < 0 {
			return nil, false
		}
		l := b[p : p+i]
		p += i + 2
		return l, bytes.IndexByte(l, '\n') < 0 && bytes.IndexByte(l, '\r') < 0
	}
	for {
		l, good := line()
		if !good {
			return nil, nil, 0, false
		}
		size, ext, _ := bytes.Cut(l, []byte(";"))
		size = bytes.TrimRight(size, " \t")
		if len(size) == 0 || len(size) > 15 {
			return nil, nil, 0, false
		}
		n, err := strconv.ParseUint(string(size), 16, 64)
		if err != nil {
			return nil, nil, 0, false
		}
		for _, c := range ext {
			if c < ' ' && c != '\t' || c == 0x7f {
				return nil, nil, 0, false
			}
		}
		if n == 0 {
			for {
				l, good := line()
				if !good {
					return nil, nil, 0, false
				}
				if len(l) == 0 {
					return data, trailer, p, true
				}
				if !validFieldLine(l) {
					return nil, nil, 0, false
				}
				for _, c := range l {
					if c < ' ' && c != '\t' || c == 0x7f {
						return nil, nil, 0, false
					}
				}
				trailer = append(append(trailer, l...), '\r', '\n')
			}
		}
		if uint64(len(b)-p) < n+2 {
			return nil, nil, 0, false
		}
		data = append(data, b[p:p+int(n)]...)
		p += int(n)
		if b[p] != '\r' || b[p+1] != '\n' {
			return nil, nil, 0, false
		}
		p += 2
	}
}

// FuzzChunked feeds a chunked body to chunkDecoder in pieces of every size: it must agree
// with the strict reference on validity, data, trailers and where the body ends, whatever
// the cut; and what appendChunk writes from the data must read back the same.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"4\r\nabcd\r\n0\r\n\r\n",
		"4;ext=1\r\nabcd\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n",
		"4 \r\nabcd\r\n0\r\n\r\n",
		"4\nabcd\r\n0\r\n\r\n",
		"4\r\nabcd\n0\r\n\r\n",
		"4x\r\nabcd\r\n0\r\n\r\n",
		"-1\r\n",
		"fffffffffffffffff\r\n",
		"0\r\n\r\n",
		"0\r\n X: 1\r\n\r\n",
		"1\r\nab\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		data, trailer, end, ok := refChunked(b)
		step := int(cut)%16 + 1
		var d chunkDecoder
		var got []byte
		used, failed := 0, false
		for used < len(b) && !d.done() && !failed {
			piece := b[used:min(len(b), used+step)]
			for len(piece) > 0 && !d.done() {
				n, p, err := d.decode(piece)
				if err != nil {
					failed = true
					break
				}
				got = append(got, p...)
				used += n
				piece = piece[n:]
			}
		}
		switch {
		case ok && (failed || !d.done()):
			t.Fatalf("valid body refused (failed %v, done %v) in steps of %d: %q", failed, d.done(), step, b)
		case !ok && d.done():
			t.Fatalf("invalid (or incomplete) body accepted in steps of %d: %q", step, b)
		case ok && (used != end || !bytes.Equal(got, data) || !bytes.Equal(d.trailer, trailer)):
			t.Fatalf("steps of %d: ended at %d (want %d), data %q (want %q), trailer %q (want %q)", step, used, end, got, data, d.trailer, trailer)
		}
		if ok { // a round trip through the encoder
			enc := appendLastChunk(appendChunk(nil, data), trailer)
			d2, t2, e2, ok2 := refChunked(enc)
			if !ok2 || e2 != len(enc) || !bytes.Equal(d2, data) || !bytes.Equal(t2, trailer) {
				t.Fatalf("re-encoded %q does not read back", enc)
			}
		}
	})
}

// FuzzRequestChecks runs the engine's head checks on arbitrary heads: they never panic, and
// a head they accept is one the strict reference framer accepts too, with the same framing.
func FuzzRequestChecks(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 1\nY: 2\r\n\r\n",
		"GET http://a/ HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		scan := 0
		end := headEnd(b, &scan)
		if end == 0 {
			return
		}
		head := b[skipEmptyLines(b[:end]):end]
		var r reqHead
		if checkRequest(head, &r) != headOK {
			return
		}
		ref, _, err := h1conformance.ReadStrict(append(append([]byte(nil), head...), bodyFor(&r)...), true)
		if err != nil {
			t.Fatalf("accepted a head the reference refuses (%v): %q", err, head)
		}
		want := 0
		switch {
		case r.chunked:
			want = 3
		case r.clen > 0 && r.clen < 1<<20:
			want = int(r.clen)
		}
		if len(ref.Hosts) > 1 || len(ref.Body) != want {
			t.Fatalf("framing differs: the reference read a body of %d bytes, want %d, for %q", len(ref.Body), want, head)
		}
		if string(r.method) != ref.Method || string(r.target) != ref.Target {
			t.Fatalf("request line read as %q %q, reference %q %q", r.method, r.target, ref.Method, ref.Target)
		}
	})
}

// bodyFor is a body matching r's framing, for the reference to frame the request whole.
func bodyFor(r *reqHead) []byte {
	switch {
	case r.chunked:
		return []byte("3\r\nabc\r\n0\r\n\r\n")
	case r.clen > 0 && r.clen < 1<<20:
		return bytes.Repeat([]byte("x"), int(r.clen))
	}
	return nil
}
