package httpproxy

import (
	"io"
	"sync"
)

// relayBufSize is how much of a streamed response body the relay gathers before writing it.
const relayBufSize = 16 << 10

var relayBufPool = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// SupportsBodyWriteTo tells fasthttp that WriteTo may stand in for Read: it reads the body
// through Read, so deadlines, trailers and the end-of-body state behave the same.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// WriteTo relays the body to the client as it arrives from the backend: it gathers what is
// already waiting and writes that before it waits for more, so a trickling body (server-sent
// events, long polling, tokens) reaches the client byte by byte, not when it ends.
//
// fasthttp writes a body with a length through a buffer that it flushes only when full, so
// for such a body w is bypassed and the bytes go straight to the client connection; the
// headers were flushed ahead of it (ImmediateHeaderFlush, set by deliver). A chunked body goes
// through w, whose every chunk fasthttp flushes. The count returned is the bytes relayed.
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	dst := w
	if r.remain >= 0 {
		dst = r.ctx.Conn()
	}
	bp := relayBufPool.Get().(*[]byte)
	defer relayBufPool.Put(bp)
	var total int64
	for {
		n, err := r.gather(*bp)
		if n > 0 {
			if _, werr := dst.Write((*bp)[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// gather reads into buf until it is full, the body ends, or the next read would wait for the
// backend: bytes are held back only while more are already waiting.
func (r *relay) gather(buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
		if r.eof {
			// The length is reached; the next Read reports the end (and copies trailers).
			continue
		}
		if a := r.a; a == nil || a.br == nil || a.br.Buffered() == 0 {
			return n, nil
		}
	}
	return n, nil
}
