package h2proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gRPC status codes Ballast answers with (google.golang.org/grpc/codes).
const (
	grpcInvalidArgument   = "3"
	grpcDeadlineExceeded  = "4"
	grpcPermissionDenied  = "7"
	grpcResourceExhausted = "8"
	grpcUnimplemented     = "12"
	grpcUnavailable       = "14"
)

// grpcCode is the gRPC status of an answer Ballast gives itself with this HTTP status.
func grpcCode(status int) string {
	switch status {
	case 404, 405:
		return grpcUnimplemented
	case 408, 504:
		return grpcDeadlineExceeded
	case 403:
		return grpcPermissionDenied
	case 413, 429, 431:
		return grpcResourceExhausted
	case 400, 505:
		return grpcInvalidArgument
	}
	return grpcUnavailable
}

// isGRPC reports a gRPC request: content-type application/grpc, alone or with a subtype.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/grpc") && (len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';')
}

// grpcTimeout parses a grpc-timeout value: at most 8 digits and a unit H, M, S, m, u or n
// (the gRPC over HTTP/2 protocol). ok is false for anything else.
func grpcTimeout(v string) (d time.Duration, ok bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(v[:len(v)-1]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// grpcMessage percent-encodes a grpc-message value as the protocol asks (bytes outside
// printable ASCII and '%').
func grpcMessage(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)+strconv.FormatUint(uint64(c)&15, 16)))
	}
	return b.String()
}
