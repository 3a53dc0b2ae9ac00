package l4

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
)

// maxHello bounds the bytes read from a client looking for its ClientHello: one full TLS
// record (16 KiB of payload) and its header, which holds any ClientHello seen in practice.
const maxHello = 5 + 16384

var errNotHello = errors.New("not a TLS ClientHello")

// readHello reads from r, after the bytes already in buf, until buf holds a whole ClientHello
// (possibly over several handshake records), and returns buf and the server name, lower-cased
// ("" when there is none). It never reads more than maxHello bytes in all. A stream that is
// not TLS returns errNotHello with what was read, which is still forwarded.
func readHello(r io.Reader, buf []byte) ([]byte, string, error) {
	for {
		name, err := parseHello(buf)
		if err != errShortHello {
			return buf, name, err
		}
		if len(buf) >= maxHello {
			return buf, "", errNotHello
		}
		if cap(buf)-len(buf) < 512 {
			nb := make([]byte, len(buf), min(maxHello, max(2*cap(buf), 2048)))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), maxHello)])
		buf = buf[:len(buf)+n]
		if err != nil && n == 0 {
			return buf, "", err
		}
	}
}

var errShortHello = errors.New("incomplete ClientHello")

// parseHello extracts the server_name from a ClientHello at the start of b, gathering the
// handshake message from consecutive handshake records. errShortHello means "read more".
func parseHello(b []byte) (string, error) {
	var msg []byte
	for len(b) > 0 {
		if len(b) < 5 {
			return "", errShortHello
		}
		if b[0] != 22 || b[1] != 3 {
			return "", errNotHello
		}
		n := int(binary.BigEndian.Uint16(b[3:5]))
		if n == 0 || n > 16384 {
			return "", errNotHello
		}
		if len(b) < 5+n {
			return "", errShortHello
		}
		msg = append(msg, b[5:5+n]...)
		b = b[5+n:]
		if len(msg) >= 4 {
			if msg[0] != 1 {
				return "", errNotHello
			}
			if hl := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]); len(msg) >= 4+hl {
				return serverName(msg[4 : 4+hl])
			} else if hl > maxHello {
				return "", errNotHello
			}
		}
	}
	return "", errShortHello
}

// serverName walks a ClientHello body to its server_name extension.
func serverName(h []byte) (string, error) {
	rd := reader(h)
	if !rd.skip(2+32) || !rd.skipVec(1) || !rd.skipVec(2) || !rd.skipVec(1) {
		return "", errNotHello
	}
	if len(rd) == 0 {
		return "", nil // no extensions
	}
	exts, ok := rd.vec(2)
	if !ok {
		return "", errNotHello
	}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		body, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return "", errNotHello
		}
		if typ != 0 {
			continue
		}
		list, ok := body.vec(2)
		for ok && len(list) > 0 {
			var kind []byte
			if kind, ok = list.take(1); !ok {
				break
			}
			var name reader
			if name, ok = list.vec(2); ok && kind[0] == 0 {
				return strings.ToLower(string(name)), nil
			}
		}
		return "", errNotHello
	}
	return "", nil
}

// reader consumes a TLS message with bounds checks.
type reader []byte

func (r *reader) take(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b, true
}

func (r *reader) skip(n int) bool { _, ok := r.take(n); return ok }

func (r *reader) u16() (uint16, bool) {
	b, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint16(b), true
}

// vec takes a vector with a length prefix of size bytes (1 or 2).
func (r *reader) vec(size int) (reader, bool) {
	lb, ok := r.take(size)
	if !ok {
		return nil, false
	}
	n := int(lb[0])
	if size == 2 {
		n = int(binary.BigEndian.Uint16(lb))
	}
	b, ok := r.take(n)
	return reader(b), ok
}

func (r *reader) skipVec(size int) bool { _, ok := r.vec(size); return ok }

// matchSNI reports whether name matches a route's pattern: equal, or "*.suffix" with exactly
// one label in front.
func matchSNI(pattern, name string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		i := strings.IndexByte(name, '.')
		return i > 0 && name[i+1:] == rest
	}
	return pattern == name
}
