package httpproxy

import (
	"math/rand/v2"
	"unsafe"

	"github.com/valyala/fasthttp"
)

var (
	keyRequestID   = []byte("X-Request-Id")
	keyTraceparent = []byte("Traceparent")
	keyTracestate  = []byte("Tracestate")
)

// maxRequestID bounds an X-Request-Id kept from a trusted proxy.
const maxRequestID = 128

const hexDigits = "0123456789abcdef"

// requestID gives the request its X-Request-Id: a trusted proxy's is kept when it is
// sensible (1 to 128 visible ASCII characters), anything else is replaced by 32 random hex
// digits. A W3C traceparent passes unchanged when it is well formed (its trace-id goes to the
// access log) and is dropped, with its tracestate, when it is not, as Trace Context §3.2.2
// asks of a vendor that cannot parse it.
func (st *reqState) requestID(h *fasthttp.RequestHeader) {
	if v := h.PeekBytes(keyRequestID); st.trusted && validRequestID(v) {
		st.id = append(st.id[:0], v...)
	} else {
		st.id = appendRandomHex(st.id[:0])
		h.SetCanonical(keyRequestID, st.id)
	}
	if v := h.PeekBytes(keyTraceparent); len(v) > 0 {
		if id, ok := traceID(v); ok {
			st.trace = append(st.trace[:0], id...)
		} else {
			h.DelBytes(keyTraceparent)
			h.DelBytes(keyTracestate)
		}
	}
}

func validRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestID {
		return false
	}
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// appendRandomHex appends 128 random bits as 32 lower-case hex digits.
func appendRandomHex(b []byte) []byte {
	for range 2 {
		u := rand.Uint64()
		for i := 60; i >= 0; i -= 4 {
			b = append(b, hexDigits[(u>>uint(i))&15])
		}
	}
	return b
}

// traceID returns the trace-id of a version-00 traceparent
// ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>"), or false when v is not one.
// A later version may append fields after the flags (Trace Context §3.2.4).
func traceID(v []byte) ([]byte, bool) {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || (len(v) > 55 && v[55] != '-') {
		return nil, false
	}
	ver, tid, pid, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(ver) || !lowerHex(tid) || !lowerHex(pid) || !lowerHex(flags) {
		return nil, false
	}
	if string(ver) == "ff" || (string(ver) == "00" && len(v) != 55) || allZero(tid) || allZero(pid) {
		return nil, false
	}
	return tid, true
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// b2s returns b as a string without copying; b must not change while the string is used.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// trimSpace trims spaces and tabs at both ends.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
