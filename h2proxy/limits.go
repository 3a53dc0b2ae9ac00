package h2proxy

import "time"

// The per-connection limits of the HTTP/2 front end: one place for each default; the
// operations guide lists them.
const (
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: streams open at once per
	// connection (nginx and Go default to 128 and 250; gRPC clients multiplex many).
	MaxConcurrentStreams = 250
	// MaxClientResetsPerSecond is how many streams a client may cancel (RST_STREAM) in one
	// second before the connection is closed: rapid reset, CVE-2023-44487.
	MaxClientResetsPerSecond = 200
	// StreamWindow and ConnWindow are the flow-control windows Ballast grants a client for
	// request bodies, per stream and per connection: what one connection may buffer.
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
	// MaxReadFrameSize is SETTINGS_MAX_FRAME_SIZE, the largest frame accepted: the protocol's
	// initial 16 KiB.
	MaxReadFrameSize = 1 << 14
	// PingAfter is how long a connection may be silent before Ballast pings it; PingTimeout
	// closes it when the ping is not answered.
	PingAfter   = 30 * time.Second
	PingTimeout = 15 * time.Second
)
