//go:build linux

package h1

import (
	"sync/atomic"

	"ballast/httpcore"
)

// Response compression on the shard. The core decides (httpcore.Exchange.Respond: the route's
// types, min_size and algorithms, the client's Accept-Encoding with its q-values, Vary, the
// weak ETag, never a HEAD, a 204, a 206, a 304 or a body already encoded); the engine codes
// the body as it reads it from the backend: each read's body bytes (a Content-Length body's,
// a chunked one's decoded pieces, a close-delimited one's) are pushed into an
// httpcore.Encoder whose output is written into the shard's write buffer, framed as chunks
// to an HTTP/1.1 client, as they are to an HTTP/1.0 one (delimited by the close) and as DATA
// to an HTTP/2 stream. A read that did not fill its buffer ends with a Flush (the backend has
// nothing more for now: what it sent must reach the client), and so does a wait for the
// backend with coded bytes held; the body's end ends the stream. Backpressure is the
// engine's, unchanged: the coded bytes of one read wait for a client that does not take
// them, and the backend is not read meanwhile.
//
// Encoders are the shard's: a free list per coding (keepEncoders each, their state kept),
// and at most maxEncoders in use at once; a response that would be compressed while they
// are all in use goes as it is (httpcore's WithoutEncoder), counted in Stats.CompressDeclined.
// An encoder's state is about 2 MB for brotli (a 256 KiB window) and 1 MB for gzip, so a
// shard's coders hold at most 64 MB in use (maxEncoders brotli ones) and 12 MB idle; a
// response being compressed holds one encoder and, while its client does not take them, one
// read's coded bytes (about 64 KiB, 16 KiB on an HTTP/2 stream).

// maxEncoders bounds the encoders a shard has in use: responses being compressed at once.
const maxEncoders = 32

// keepEncoders bounds the idle encoders a shard keeps per coding.
const keepEncoders = 4

// encoders is a shard's: its free encoders and counters.
type encoders struct {
	free  [2][]*httpcore.Encoder // by coding: brotli, gzip
	inUse int
	// Written by the shard, read by Stats.
	compressed, declined, held atomic.Int64
}

func codingSlot(enc httpcore.Encoding) int {
	if enc == httpcore.EncBrotli {
		return 0
	}
	return 1
}

// take returns an encoder of enc, reset for a body of size bytes (0: unknown).
func (zs *encoders) take(enc httpcore.Encoding, size int64) *httpcore.Encoder {
	k := codingSlot(enc)
	var z *httpcore.Encoder
	if f := zs.free[k]; len(f) > 0 {
		z = f[len(f)-1]
		f[len(f)-1] = nil
		zs.free[k] = f[:len(f)-1]
	} else {
		z = httpcore.NewEncoder(enc)
	}
	z.Reset(size)
	zs.inUse++
	zs.held.Store(int64(zs.inUse))
	return z
}

// put gives z back: kept for the next response, or to the collector beyond keepEncoders.
func (zs *encoders) put(z *httpcore.Encoder) {
	zs.inUse--
	zs.held.Store(int64(zs.inUse))
	k := codingSlot(z.Encoding())
	if len(zs.free[k]) < keepEncoders {
		zs.free[k] = append(zs.free[k], z)
	}
}

// limitCompression tells the core, before it decides on a response, that the shard has no
// encoder to spare.
func (ex *exchange) limitCompression() {
	if ex.sh.z.inUse >= int(ex.sh.e.maxEncoders.Load()) {
		ex.cx.WithoutEncoder()
	}
}

// compress sets up the response's coding with enc, which the core chose and announced
// (Content-Encoding): Content-Length goes (the coded length is not known), an HTTP/1.1
// client gets the body chunked (a chunked backend's Transfer-Encoding stays), an HTTP/1.0
// one delimited by the close.
func (ex *exchange) compress(enc httpcore.Encoding, m *respMode) {
	rs := &ex.resp
	zs := &ex.sh.z
	if ex.cx.Declined() {
		zs.declined.Add(1)
	}
	if enc == httpcore.EncNone || rs.framing == fNone {
		return
	}
	size := int64(0)
	if rs.framing == fLength {
		size = rs.remain
		ex.rm.Del(keyContentLength)
	}
	rs.z = zs.take(enc, size)
	zs.compressed.Add(1)
	rs.zchunk = !ex.c.raw()
	switch {
	case rs.framing != fLength:
	case rs.zchunk:
		m.chunk = true
	default:
		rs.out = oRaw // HTTP/1.0: delimited by the close (an HTTP/2 stream frames it as DATA)
	}
}

var keyContentLength = []byte("Content-Length")

// frameCompressed is frameResponse for a compressed body: the body bytes of p are coded
// after w. The body's end ends the coded stream (and an HTTP/1.1 client's chunks); a read
// shorter than a full one ends with a Flush.
func (ex *exchange) frameCompressed(p, w []byte) (used int, out []byte) {
	rs := &ex.resp
	switch rs.framing {
	case fLength:
		k := int(min(int64(len(p)), rs.remain))
		rs.remain -= int64(k)
		rs.bytesOut += int64(k)
		used, w = k, ex.zwrite(w, p[:k])
	case fClose:
		rs.bytesOut += int64(len(p))
		used, w = len(p), ex.zwrite(w, p)
	default:
		for used < len(p) && !rs.dec.done() {
			n, piece, err := rs.dec.decode(p[used:])
			if err != nil {
				rs.reusable, rs.broken = false, true // the client is cut off after what was valid
				return used, ex.zflush(w)
			}
			used += n
			if len(piece) > 0 {
				rs.bytesOut += int64(len(piece))
				w = ex.zwrite(w, piece)
			}
		}
	}
	switch {
	case ex.respDone():
		w = ex.zend(w)
	case len(p) < ex.c.readSize():
		w = ex.zflush(w)
	}
	return used, w
}

// chunkHead is the place a chunk's size line takes before the size is known: eight hex
// digits (leading zeros are allowed, RFC 9112 §7.1) and CRLF.
const chunkHead = 10

// zchunked runs code, which appends coded bytes to w, and frames what it appended as one
// chunk for an HTTP/1.1 client (nothing when it appended nothing).
func (ex *exchange) zchunked(w []byte, code func([]byte) []byte) []byte {
	if !ex.resp.zchunk {
		return code(w)
	}
	at := len(w)
	w = code(append(w, "00000000\r\n"...))
	n := len(w) - at - chunkHead
	if n == 0 {
		return w[:at]
	}
	const hex = "0123456789abcdef"
	for i := 7; i >= 0; i-- {
		w[at+i] = hex[n&15]
		n >>= 4
	}
	return append(w, '\r', '\n')
}

func (ex *exchange) zwrite(w, p []byte) []byte {
	z := ex.resp.z
	return ex.zchunked(w, func(w []byte) []byte { return z.Write(w, p) })
}

func (ex *exchange) zflush(w []byte) []byte {
	z := ex.resp.z
	if !z.Pending() {
		return w
	}
	return ex.zchunked(w, z.Flush)
}

// zend ends the coded stream (and an HTTP/1.1 client's chunks, with a chunked backend's
// trailers) and gives the encoder back.
func (ex *exchange) zend(w []byte) []byte {
	rs := &ex.resp
	w = ex.zchunked(w, rs.z.Close)
	if rs.zchunk {
		var trailer []byte
		if rs.framing == fChunked {
			trailer = rs.dec.trailer
		}
		w = appendLastChunk(w, trailer)
	}
	ex.dropEncoder()
	return w
}

// zhold writes what the encoder holds before the exchange waits for the backend: the client
// gets what the backend sent so far.
func (ex *exchange) zhold() {
	rs := &ex.resp
	if rs.z == nil || !rs.z.Pending() {
		return
	}
	sh := ex.sh
	sh.wbuf = ex.zflush(sh.wbuf[:0])
	ex.c.write(sh.wbuf, nil)
}

// dropEncoder gives the response's encoder back to the shard.
func (ex *exchange) dropEncoder() {
	if z := ex.resp.z; z != nil {
		ex.resp.z = nil
		ex.sh.z.put(z)
	}
}
