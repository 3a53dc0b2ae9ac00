package h1

// Stats are the engine's counters, summed over its shards (Engine.Stats): gauges of what is
// open now, and totals since the engine started. Package admin shows every field on /metrics
// (ballast_http1_*). Off Linux the engine does not run and its Stats are zero.
type Stats struct {
	Conns, Accepted, Requests int64 // open client connections; accepted; requests read
	Refused                   int64 // request heads answered 4xx/5xx by the engine's checks
	ConnsRefused              int64 // connections closed at accept for max_conns_per_client
	HeaderTimeouts            int64 // connections closed for read_header_timeout
	IdleTimeouts              int64 // idle keep-alive connections closed for idle_timeout
	BodyTimeouts              int64 // requests whose body was too slow (408)
	WriteTimeouts             int64 // clients that did not read their response for idle_timeout
	TLSFailures               int64 // TLS handshakes that failed or timed out (read_header_timeout)
	TLSRefused                int64 // connections closed at accept: maxHandshakes were in progress
	BackendConns              int64 // open backend connections (in use or idle)
	BackendTLS                int64 // backend TLS handshakes completed (backendtls.go)
	BackendTLSResumed         int64 // of which resumed a session the backend had given
	BackendTLSFailures        int64 // backend handshakes that failed (verification) or timed out (timeouts.connect)
	BackendTLSRefused         int64 // backend connections failed: maxBackendHandshakes were in progress
	Connects, ConnectFailures int64
	Active                    int64 // requests in flight (reading the body up to the response's end)
	Queued                    int64 // requests that waited in a backlog
	Tunnels                   int64 // open Upgrade tunnels
	AcceptFailures            int64 // accepts refused for want of descriptors
	LogDropped                int64 // access-log lines lost to a writer that fell behind
	Compressed                int64 // responses compressed
	CompressDeclined          int64 // responses sent as they are: maxEncoders were in use
	Encoders                  int64 // encoders in use (responses being compressed)
}

// H2BackendStats are the engine's counters of HTTP/2 backends (pools with protocol h2c and
// h2, h2backend.go), summed over its shards and every such pool (Engine.H2BackendStats; they
// are kept per shard, not per pool). Package admin shows every field on /metrics
// (ballast_http2_backend_*). Off Linux they are zero.
type H2BackendStats struct {
	Conns           int64 // open HTTP/2 backend connections (connecting, in use or idle)
	Connects        int64 // connections dialled
	ConnectFailures int64 // connections that could not be made (refused, timed out, TLS): their waiting streams failed or waited on
	TLSFailures     int64 // of which: TLS handshakes that failed, timed out or did not negotiate h2 (protocol h2)
	Streams         int64 // streams opened (requests sent)
	Waiting         int64 // streams waiting for a slot now (every connection full or still connecting)
	Waits           int64 // streams that waited for a slot (every connection full, no more allowed)
	Overflows       int64 // attempts failed at once (502): h2bMaxWaiting streams were waiting already
	GoAways         int64 // GOAWAY frames from backends
	Refused         int64 // streams the backend refused (above a GOAWAY's last-stream-id, or REFUSED_STREAM): sent again
	// Mux holds the HTTP/2 client connections' protocol counters (stall resets, PING
	// timeouts, malformed responses, ...).
	Mux H2MuxStats
}

// H2MuxStats are the h2mux counters that matter on the client side.
type H2MuxStats struct {
	StreamErrors       uint64 // streams reset for the backend's protocol errors
	MalformedResponses uint64 // of which: response heads or bodies that violate RFC 9113 §8
	StallResets        uint64 // streams reset after the stall timeout without window
	ConnErrors         uint64 // connections ended by a connection error (all causes)
	PingTimeouts       uint64 // of which: no answer to a PING after silence
	RefusedStreams     uint64 // streams above a GOAWAY's last-stream-id
	PeerResets         uint64 // RST_STREAM from the backend
	FieldsDropped      uint64 // request fields left out (connection-specific or invalid)
}
