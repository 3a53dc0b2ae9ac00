package httpcore

import "math/rand/v2"

// maxRequestID bounds an X-Request-Id kept from a trusted proxy.
const maxRequestID = 128

// requestID gives the request its X-Request-Id: a trusted proxy's is kept when it is
// sensible (1 to 128 visible ASCII characters), anything else is replaced by 32 random hex
// digits. A W3C traceparent passes unchanged when it is well formed (its trace-id goes to the
// access log) and is dropped, with its tracestate, when it is not, as Trace Context §3.2.2
// asks of a vendor that cannot parse it.
func (x *Exchange) requestID(req Request) {
	if v := req.Peek(keyRequestID); x.trusted && validRequestID(v) {
		x.id = append(x.id[:0], v...)
	} else {
		x.id = appendRandomHex(x.id[:0])
		req.Set(keyRequestID, x.id)
	}
	if v := req.Peek(keyTraceparent); len(v) > 0 {
		if id, ok := traceID(v); ok {
			x.trace = append(x.trace[:0], id...)
		} else {
			req.Del(keyTraceparent)
			req.Del(keyTracestate)
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
