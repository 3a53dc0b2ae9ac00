package proxyproto

import (
	"errors"
	"io"
)

// Read reads one header from r into buf (which should have room for MaxHeaderLen bytes; it
// grows to that bound only if a v2 header needs it) and returns the header and the bytes that
// arrived after it in the same reads, which the caller must treat as the start of the stream.
// It never reads more than MaxHeaderLen bytes. The caller bounds the time, e.g. with a read
// deadline on the connection.
func Read(r io.Reader, buf []byte) (Header, []byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= MaxHeaderLen {
				return Header{}, nil, ErrTooLong
			}
			nb := make([]byte, len(buf), MaxHeaderLen)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			h, hl, perr := Parse(buf)
			if perr == nil {
				return h, buf[hl:], nil
			}
			if perr != ErrIncomplete {
				return Header{}, nil, perr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(buf) == 0 {
					return Header{}, nil, ErrNoHeader
				}
				err = ErrIncomplete
			}
			return Header{}, nil, err
		}
	}
}
