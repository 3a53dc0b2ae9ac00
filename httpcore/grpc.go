package httpcore

import (
	"strconv"
	"strings"
	"time"
)

// gRPC over HTTP/2, as the event-loop engine's streams need it (h1/grpc.go): the status of
// an answer Ballast gives itself, the grpc-timeout field, the grpc-message encoding.

// gRPC status codes Ballast answers with (google.golang.org/grpc/codes).
const (
	GRPCInvalidArgument   = "3"
	GRPCDeadlineExceeded  = "4"
	GRPCPermissionDenied  = "7"
	GRPCResourceExhausted = "8"
	GRPCUnimplemented     = "12"
	GRPCUnavailable       = "14"
)

// GRPCCode is the gRPC status of an answer Ballast gives itself with this HTTP status.
func GRPCCode(status int) string {
	switch status {
	case 404, 405:
		return GRPCUnimplemented
	case 408, 504:
		return GRPCDeadlineExceeded
	case 403:
		return GRPCPermissionDenied
	case 413, 429, 431:
		return GRPCResourceExhausted
	case 400, 505:
		return GRPCInvalidArgument
	}
	return GRPCUnavailable
}

// IsGRPC reports a gRPC request's content-type: application/grpc, alone or with a subtype.
func IsGRPC(ct string) bool {
	return strings.HasPrefix(ct, "application/grpc") && (len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';')
}

// GRPCTimeout parses a grpc-timeout value: at most 8 digits and a unit H, M, S, m, u or n
// (the gRPC over HTTP/2 protocol). ok is false for anything else.
func GRPCTimeout(v string) (d time.Duration, ok bool) {
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

// GRPCMessage percent-encodes a grpc-message value as the protocol asks (bytes outside
// printable ASCII and '%').
func GRPCMessage(s string) string {
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
