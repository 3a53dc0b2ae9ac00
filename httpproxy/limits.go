package httpproxy

import (
	"errors"
	"io"
)

// errBodyTooLarge ends a request body of unknown length that goes past the route's
// max_body_bytes.
var errBodyTooLarge = errors.New("request body larger than max_body_bytes")

// bodyLimit passes at most max bytes of a request body of unknown length, then fails with
// errBodyTooLarge, which turns the answer into 413.
type bodyLimit struct {
	r    io.Reader
	left int64
}

func (l *bodyLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// At the limit: one more byte means too large, EOF means exactly the limit.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
