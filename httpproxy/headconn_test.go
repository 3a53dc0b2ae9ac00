package httpproxy

import (
	"bytes"
	"testing"
)

func TestHeadConnScan(t *testing.T) {
	for _, tc := range []struct {
		head   string
		ok     bool
		inHead bool // still reading the head after it
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, false},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody\n\n", true, false}, // the body is not looked at
		{"GET / HTTP/1.1\nHost: a\r\n\r\n", true, false},           // bare LF inside: fasthttp takes it
		{"GET / HTTP/1.1\r\nHost: a\n\n", false, true},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", false, true},
		{"GET / HTTP/1.1\r\nHost: a\r\n\n", false, true},
		{"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", true, false}, // empty lines first are skipped
		{"\n\nGET / HTTP/1.1\r\n\r\n", true, false},
		{"GET / HTTP/1.1\r\nHost: a\r\n", true, true},
	} {
		for _, step := range []int{0, 1, 2, 3} {
			c := &headConn{inHead: true}
			ok := true
			in := []byte(tc.head)
			if step == 0 {
				ok = c.scan(in)
			} else {
				for i := 0; i < len(in) && ok && c.inHead; i += step {
					ok = c.scan(in[i:min(i+step, len(in))])
				}
			}
			if ok != tc.ok || ok && c.inHead != tc.inHead {
				t.Errorf("%q in pieces of %d: ok %v, in head %v; want %v, %v", tc.head, step, ok, c.inHead, tc.ok, tc.inHead)
			}
		}
	}
}

// FuzzHeadConnScan: however the bytes of a head arrive, the verdict is the same as for the
// head read at once, and a head that ends in CRLF CRLF after CRLF-ended lines is never refused.
func FuzzHeadConnScan(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), uint8(3))
	f.Add([]byte("GET / HTTP/1.1\nHost: a\n\n"), uint8(1))
	f.Add([]byte("\n\r\n\nGET /\r\n"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole := &headConn{inHead: true}
		okWhole := whole.scan(in)
		n := int(step%7) + 1
		c := &headConn{inHead: true}
		ok := true
		for i := 0; i < len(in) && ok && c.inHead; i += n {
			ok = c.scan(in[i:min(i+n, len(in))])
		}
		if ok != okWhole || ok && c.inHead != whole.inHead {
			t.Fatalf("%q: at once ok %v in head %v, in pieces of %d ok %v in head %v", in, okWhole, whole.inHead, n, ok, c.inHead)
		}
		if !bytes.Contains(in, []byte("\n")) && !okWhole {
			t.Fatalf("%q has no LF, yet it was refused", in)
		}
		if i := bytes.Index(in, []byte("\r\n\r\n")); i > 0 && !bytes.Contains(in[:i+2], []byte("\n\n")) &&
			bytes.Count(in[:i+2], []byte("\n")) == bytes.Count(in[:i+2], []byte("\r\n")) && !okWhole {
			t.Fatalf("%q: a CRLF head refused", in)
		}
	})
}
