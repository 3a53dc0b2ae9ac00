package h2mux

import "time"

// The defaults of Config: one place for each; docs/http2-engine.md lists them with the attack
// each one answers.
const (
	// DefaultMaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: streams open at once per
	// connection; a HEADERS frame past it is refused (REFUSED_STREAM). The event-loop
	// engine's value too (h1/h2config.go).
	DefaultMaxConcurrentStreams = 250
	// DefaultStreamWindow and DefaultConnWindow are the receive windows granted to a client
	// for request bodies, per stream and per connection: the most request-body bytes the owner
	// can be handed and not yet have consumed (Conn.Consumed), so the owner's buffering per
	// connection is bounded by DefaultConnWindow.
	DefaultStreamWindow = 256 << 10
	DefaultConnWindow   = 1 << 20
	// DefaultMaxFrameSize is the largest frame accepted: the protocol's initial 16 KiB, never
	// raised, so a frame in progress never needs more than 16 KiB + 9 bytes of input buffer.
	DefaultMaxFrameSize = 1 << 14
	// DefaultMaxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE: the decoded size of a request
	// head or trailer block (RFC 9113 §6.5.2: names, values and 32 bytes per field). A larger
	// one is answered 431 after its block was decoded (the HPACK state must stay in sync);
	// no field may be longer either (the decoder's string cap: a longer one ends the
	// connection with COMPRESSION_ERROR). HPACK bombs (a small block that expands past it) are
	// stopped by this limit.
	DefaultMaxHeaderListSize = 16 << 10
	// DefaultMaxHeaderBlockSize caps the compressed bytes of one header block, HEADERS plus
	// all its CONTINUATION frames: past it the connection ends with ENHANCE_YOUR_CALM
	// (CONTINUATION flood, CVE-2024-27316). The bytes that arrive after the list limit was
	// exceeded are counted (Counters.HeaderBytesPastLimit).
	DefaultMaxHeaderBlockSize = 2 * DefaultMaxHeaderListSize
	// DefaultMaxHeaderFields caps the fields of one header block (HPACK bombs of many small
	// indexed fields); a request with more is answered 431.
	DefaultMaxHeaderFields = 128
	// DefaultHeaderTableSize is the HPACK dynamic table the decoder allows the client
	// (SETTINGS_HEADER_TABLE_SIZE, the protocol's default). The encoder uses none.
	DefaultHeaderTableSize = 4096
	// DefaultResetBurst and DefaultResetRate are the reset budget, a token bucket: every
	// stream the client resets before its response ended (rapid reset, CVE-2023-44487) and
	// every stream Ballast resets because of something the client sent (a stream error, a
	// refused or stalled stream: MadeYouReset, CVE-2025-8671) takes one token; tokens come
	// back at DefaultResetRate per second up to DefaultResetBurst. With none left the
	// connection ends with GOAWAY ENHANCE_YOUR_CALM.
	DefaultResetBurst = 200
	DefaultResetRate  = 100
	// DefaultEmptyFrameBurst and DefaultEmptyFrameRate budget frames that carry nothing: DATA
	// without payload or END_STREAM, HEADERS and CONTINUATION without block bytes or
	// END_HEADERS, and PRIORITY frames (ignored). Empty-frame flood, CVE-2019-9518: ENHANCE_YOUR_CALM.
	DefaultEmptyFrameBurst = 200
	DefaultEmptyFrameRate  = 100
	// DefaultMaxQueuedControl caps the control frames (SETTINGS and PING acknowledgements,
	// RST_STREAM, WINDOW_UPDATE) queued in the output and not yet drained by the owner: a
	// client that provokes them and does not read (ping flood CVE-2019-9512, settings flood
	// CVE-2019-9515, reset flood CVE-2019-9514) ends with ENHANCE_YOUR_CALM.
	DefaultMaxQueuedControl = 1000
	// DefaultMaxOutput is how many bytes of DATA the connection's output may hold undrained:
	// Conn.WriteData frames no more (the owner keeps the rest and is told when to go on), so
	// a client that reads slowly holds at most this much per connection (CVE-2019-9517).
	DefaultMaxOutput = 64 << 10
	// DefaultStallTimeout is how long a stream may wait for the client's flow-control window
	// with response bytes ready (zero-window holding, CVE-2019-9517: the stream is reset with
	// CANCEL and counts against the reset budget), and how long the output may sit undrained
	// with bytes in it (a client that does not read: the connection ends).
	DefaultStallTimeout = 30 * time.Second
	// DefaultLingerTimeout is how long a stream whose response is complete, while its request
	// is still arriving, is read on (its frames checked, its DATA dropped) before RST_STREAM
	// NO_ERROR tells the client to stop (RFC 9113 §8.1).
	DefaultLingerTimeout = time.Second
	// DefaultSettingsTimeout is how long the client has to acknowledge Ballast's SETTINGS
	// (RFC 9113 §6.5.3: SETTINGS_TIMEOUT).
	DefaultSettingsTimeout = 10 * time.Second
	// MaxResponseHeaderBlock caps the encoded size of a response head or trailer block the
	// owner hands the connection (HeaderBlock.Send fails with ErrHeadersTooLarge past it).
	MaxResponseHeaderBlock = 64 << 10
	// maxSendFrame caps the DATA frames Ballast writes, whatever larger SETTINGS_MAX_FRAME_SIZE
	// the client allows: 16 KiB frames keep streams interleaved and TLS records full.
	maxSendFrame = 1 << 14
	// resetRingSize is how many streams Ballast reset are remembered, so that frames the client
	// sent before it saw the RST_STREAM are ignored rather than answered (RFC 9113 §5.1).
	resetRingSize = 32
	// maxFreeStreams is how many ended streams' structs a connection keeps for its next
	// streams; more are left to the collector, so an idle connection stays small.
	maxFreeStreams = 16
	// maxKeptBlock is the largest response header buffer a connection keeps between heads.
	maxKeptBlock = 4 << 10
)
