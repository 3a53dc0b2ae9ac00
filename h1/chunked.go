package h1

import (
	"errors"

	"ballast/httpcore"
)

// chunkDecoder reads a chunked body (RFC 9112 §7.1) as it arrives, in pieces of any size, and
// yields its data; what it refuses (a size that is not hex or overflows, a size line or a
// chunk's end without CRLF, a bare LF, control bytes in an extension or a trailer line that
// is not a field) ends the body with an error, so no request can hide another one in its
// framing. The trailer section is kept, validated, to be passed on.
type chunkDecoder struct {
	state   uint8
	size    int64 // the chunk being read: digits so far, then the data left
	digits  int
	ext     bool   // an extension began on this size line
	line    int    // bytes of the current size or trailer line, bounded by maxChunkLine
	trailer []byte // the trailer field lines, each ended by CRLF (nil when none)
}

const (
	chSize    uint8 = iota // in the size digits
	chExt                  // after the digits: extension or whitespace, up to CR
	chSizeLF               // CR seen, LF expected
	chData                 // data bytes
	chDataCR               // after the data: CR expected
	chDataLF               // LF expected
	chTrailer              // at the start of a trailer line (or the final CRLF)
	chTrLine               // inside a trailer line
	chTrLF                 // a trailer line's CR seen
	chEndLF                // the final CR seen
	chDone
)

// maxChunkLine bounds a size line (with extensions) and the trailer section.
const maxChunkLine = 8 << 10

var errChunked = errors.New("malformed chunked body")

// done reports that the last chunk and the trailer section have been read.
func (d *chunkDecoder) done() bool { return d.state == chDone }

// reset prepares d for a new body, keeping the trailer buffer's storage.
func (d *chunkDecoder) reset() { *d = chunkDecoder{trailer: d.trailer[:0]} }

// decode consumes framing bytes of p and returns the number of bytes consumed and the data
// found there: at most one contiguous piece per call (data points into p). Call it again
// with the rest of p until it is consumed or done reports the end; bytes after the end are
// not consumed.
func (d *chunkDecoder) decode(p []byte) (n int, data []byte, err error) {
	for n < len(p) {
		c := p[n]
		switch d.state {
		case chSize:
			v := unhex(c)
			if v < 0 {
				if d.digits == 0 {
					return n, nil, errChunked
				}
				d.state = chExt
				continue // look at c again
			}
			if d.digits++; d.digits > 15 {
				return n, nil, errChunked // 2^60: overflow
			}
			d.size = d.size<<4 | int64(v)
			d.line++
		case chExt:
			// Whitespace, then nothing or ";" and an extension, up to CRLF.
			d.line++
			switch {
			case c == '\r':
				d.state = chSizeLF
			case c == '\n' || c < ' ' && c != '\t' || c == 0x7f || d.line > maxChunkLine:
				return n, nil, errChunked
			case c == ';':
				d.ext = true
			case !d.ext && c != ' ' && c != '\t':
				return n, nil, errChunked // "4x": not a size
			}
		case chSizeLF:
			if c != '\n' {
				return n, nil, errChunked
			}
			d.line = 0
			if d.size == 0 {
				d.state = chTrailer
			} else {
				d.state = chData
			}
		case chData:
			k := int64(len(p) - n)
			if k > d.size {
				k = d.size
			}
			data = p[n : n+int(k)]
			n += int(k)
			if d.size -= k; d.size == 0 {
				d.state = chDataCR
			}
			return n, data, nil
		case chDataCR:
			if c != '\r' {
				return n, nil, errChunked
			}
			d.state = chDataLF
		case chDataLF:
			if c != '\n' {
				return n, nil, errChunked
			}
			d.state, d.digits, d.size, d.ext = chSize, 0, 0, false
		case chTrailer:
			switch {
			case c == '\r':
				d.state = chEndLF
			case httpcore.IsTChar(c):
				d.state = chTrLine
				continue
			default:
				return n, nil, errChunked // obs-fold, a bare LF, not a field
			}
		case chTrLine:
			switch {
			case c == '\r':
				if !validFieldLine(d.trailer[lastLine(d.trailer):]) {
					return n, nil, errChunked
				}
				d.state = chTrLF
			case c == '\n' || c < ' ' && c != '\t' || c == 0x7f:
				return n, nil, errChunked
			default:
				if len(d.trailer) >= maxChunkLine {
					return n, nil, errChunked
				}
				d.trailer = append(d.trailer, c)
			}
		case chTrLF:
			if c != '\n' {
				return n, nil, errChunked
			}
			d.trailer = append(d.trailer, '\r', '\n')
			d.state = chTrailer
		case chEndLF:
			if c != '\n' {
				return n, nil, errChunked
			}
			d.state = chDone
			return n + 1, nil, nil
		case chDone:
			return n, nil, nil
		}
		n++
	}
	return n, nil, nil
}

// lastLine returns where the last (unterminated) line of the trailer buffer starts.
func lastLine(b []byte) int {
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == '\n' {
			return i + 1
		}
	}
	return 0
}

// validFieldLine reports a token, a colon and a value.
func validFieldLine(l []byte) bool {
	i := 0
	for i < len(l) && httpcore.IsTChar(l[i]) {
		i++
	}
	return i > 0 && i < len(l) && l[i] == ':'
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// appendChunk appends data as one chunk.
func appendChunk(dst, data []byte) []byte {
	if len(data) == 0 {
		return dst
	}
	dst = appendHex(dst, uint64(len(data)))
	dst = append(dst, '\r', '\n')
	dst = append(dst, data...)
	return append(dst, '\r', '\n')
}

// appendLastChunk appends the last chunk, the trailer lines (each ended by CRLF) and the end.
func appendLastChunk(dst, trailer []byte) []byte {
	dst = append(dst, '0', '\r', '\n')
	dst = append(dst, trailer...)
	return append(dst, '\r', '\n')
}

func appendHex(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	var b [16]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&15]
		if v >>= 4; v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}
