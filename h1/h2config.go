//go:build linux

package h1

import (
	"time"

	"ballast/config"
	"ballast/h2mux"
)

// The limits of the engine's HTTP/2 client connections (h2c listeners, ALPN h2 on TLS ones):
// one place for each of Ballast's own values; the others are h2mux's defaults
// (h2mux/limits.go). docs/operations.md lists them all with what each answers.
const (
	// h2MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: streams open at once per
	// connection (nginx and Go default to 128 and 250; gRPC clients multiplex many).
	h2MaxConcurrentStreams = 250
	// h2ResetBurst is how many streams a client may have reset (by it, or by Ballast for
	// its errors) before the connection is closed: rapid reset, CVE-2023-44487; MadeYouReset.
	h2ResetBurst = 200
	// h2StreamWindow and h2ConnWindow are the flow-control windows granted to a client for
	// request bodies, per stream and per connection: what one connection may buffer.
	h2StreamWindow = 1 << 20
	h2ConnWindow   = 4 << 20
	// h2PingAfter is how long a connection may be silent before Ballast pings it;
	// h2PingTimeout closes it when nothing comes back within it.
	h2PingAfter   = 30 * time.Second
	h2PingTimeout = 15 * time.Second
)

// muxConfig is the h2mux configuration of an HTTP/2 client connection of listener l: the
// limits above, the listener's max_header_bytes as the header list size and its idle_timeout.
// The connection's clock, buffers and counters are the shard's and the engine's (startH2).
func muxConfig(l *config.Listener) h2mux.Config {
	maxHdr := l.MaxHeaderBytes
	if maxHdr <= 0 {
		maxHdr = config.DefaultMaxHeaderBytes
	}
	return h2mux.Config{
		MaxConcurrentStreams: h2MaxConcurrentStreams,
		StreamWindow:         h2StreamWindow,
		ConnWindow:           h2ConnWindow,
		MaxHeaderListSize:    maxHdr,
		ResetBurst:           h2ResetBurst,
		IdleTimeout:          config.Or(l.IdleTimeout.Duration, config.DefaultIdleTimeout),
		PingAfter:            h2PingAfter,
		PingTimeout:          h2PingTimeout,
	}
}
