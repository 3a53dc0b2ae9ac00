package h2proxy

import (
	"net/http"
	"time"

	"ballast/httpcore"
)

// The gRPC helpers are httpcore's (shared with the event-loop engine).

const (
	grpcUnavailable      = httpcore.GRPCUnavailable
	grpcDeadlineExceeded = httpcore.GRPCDeadlineExceeded
)

func grpcCode(status int) string { return httpcore.GRPCCode(status) }

func isGRPC(r *http.Request) bool { return httpcore.IsGRPC(r.Header.Get("Content-Type")) }

func grpcTimeout(v string) (time.Duration, bool) { return httpcore.GRPCTimeout(v) }

func grpcMessage(s string) string { return httpcore.GRPCMessage(s) }
